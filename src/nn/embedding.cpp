// Token + position embedding layer: the ids of the last forward, around ops/embedding.h's CPU cores.
#include "nn/embedding.h"

#include "base/error.h"
#include "ops/embedding.h"

#include <algorithm>

namespace fp8kit::nn {

TokenAndPositionEmbedding::TokenAndPositionEmbedding(std::string path, int64_t vocabulary_size,
                                                     int64_t sequence_length, int64_t dim)
    : sequence_length_(sequence_length), dim_(dim), tokens_({0}, DType::I32) {
  const int64_t nt = vocabulary_size * dim, np = sequence_length * dim;
  token = {path + "/token_embedding/embeddings", {vocabulary_size, dim}, std::vector<float>(nt), std::vector<float>(nt)};
  position = {path + "/position_embedding/embeddings", {sequence_length, dim}, std::vector<float>(np),
              std::vector<float>(np)};
}

std::span<const float> TokenAndPositionEmbedding::forward(std::span<const int32_t> tokens, int64_t batch, bool bf16) {
  const int64_t T = sequence_length_, D = dim_;
  FP8KIT_CHECK(static_cast<int64_t>(tokens.size()) == batch * T,
               "token batch has {} ids, expected batch {} x sequence length {}", tokens.size(), batch, T);
  out_.resize({batch, T, D});
  ops::embedding_gather(tokens, T, D, token.value, position.value, bf16, out_.span<float>());
  tokens_.resize({batch, T});
  std::copy(tokens.begin(), tokens.end(), tokens_.data<int32_t>());
  batch_ = batch;
  return out_.span<float>();
}

void TokenAndPositionEmbedding::backward(std::span<const float> dout) {
  const int64_t T = sequence_length_, D = dim_;
  FP8KIT_CHECK(static_cast<int64_t>(dout.size()) == batch_ * T * D, "embedding gradient has {} values, expected {}",
               dout.size(), batch_ * T * D);
  ops::embedding_scatter(tokens_.span<int32_t>(), T, D, dout, token.grad, position.grad);
}

}  // namespace fp8kit::nn
