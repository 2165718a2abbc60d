// Token + position embedding forward (gather) and backward (scatter-add into a dense grad).
#include "nn/embedding.h"

#include "base/error.h"
#include "numerics/cast.h"

#include <algorithm>
#include <omp.h>

namespace fp8kit::nn {

TokenAndPositionEmbedding::TokenAndPositionEmbedding(std::string path, int64_t vocabulary_size,
                                                     int64_t sequence_length, int64_t dim)
    : vocabulary_size_(vocabulary_size), sequence_length_(sequence_length), dim_(dim), tokens_({0}, DType::I32) {
  const int64_t nt = vocabulary_size * dim, np = sequence_length * dim;
  token = {path + "/token_embedding/embeddings", {vocabulary_size, dim}, std::vector<float>(nt), std::vector<float>(nt)};
  position = {path + "/position_embedding/embeddings", {sequence_length, dim}, std::vector<float>(np),
              std::vector<float>(np)};
}

std::span<const float> TokenAndPositionEmbedding::forward(std::span<const int32_t> tokens, int64_t batch, bool bf16) {
  const int64_t T = sequence_length_, D = dim_;
  FP8KIT_CHECK(static_cast<int64_t>(tokens.size()) == batch * T,
               "token batch has {} ids, expected batch {} x sequence length {}", tokens.size(), batch, T);
  for (size_t i = 0; i < tokens.size(); ++i) {
    FP8KIT_CHECK(tokens[i] >= 0 && tokens[i] < vocabulary_size_,
                 "token id {} at position {} is outside the vocabulary [0, {})", tokens[i], i, vocabulary_size_);
  }
  tokens_.resize({batch, T});
  std::copy(tokens.begin(), tokens.end(), tokens_.data<int32_t>());
  batch_ = batch;
  out_.resize({batch, T, D});
  float* out = out_.data<float>();
  const float* tok = token.value.data();
  const float* pos = position.value.data();
#pragma omp parallel for schedule(static) if (batch * T * D >= 65536)
  for (int64_t bt = 0; bt < batch * T; ++bt) {
    const float* tr = tok + static_cast<int64_t>(tokens[bt]) * D;
    const float* pr = pos + (bt % T) * D;
    float* o = out + bt * D;
    for (int64_t d = 0; d < D; ++d) o[d] = bf16 ? round_bf16(round_bf16(tr[d]) + round_bf16(pr[d])) : tr[d] + pr[d];
  }
  return out_.span<float>();
}

void TokenAndPositionEmbedding::backward(std::span<const float> dout) {
  const int64_t T = sequence_length_, D = dim_;
  FP8KIT_CHECK(static_cast<int64_t>(dout.size()) == batch_ * T * D, "embedding gradient has {} values, expected {}",
               dout.size(), batch_ * T * D);
  float* tg = token.grad.data();
  float* pg = position.grad.data();
  const int64_t rows = batch_ * T;
  const int32_t* ids = tokens_.data<int32_t>();
  // Threads own disjoint slices of the embedding dimension, so the scatter-add has no conflicts
  // and every element is summed in batch order whatever the thread count.
#pragma omp parallel if (rows * D >= 65536)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t d0 = D * t / nt, d1 = D * (t + 1) / nt;
    for (int64_t v = 0; v < vocabulary_size_; ++v) std::fill(tg + v * D + d0, tg + v * D + d1, 0.0f);
    for (int64_t p = 0; p < T; ++p) std::fill(pg + p * D + d0, pg + p * D + d1, 0.0f);
    for (int64_t bt = 0; bt < rows; ++bt) {
      float* tr = tg + static_cast<int64_t>(ids[bt]) * D;
      float* pr = pg + (bt % T) * D;
      const float* g = dout.data() + bt * D;
      for (int64_t d = d0; d < d1; ++d) {
        tr[d] += g[d];
        pr[d] += g[d];
      }
    }
  }
}

}  // namespace fp8kit::nn
