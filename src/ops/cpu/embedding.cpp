// Token + position embedding on the CPU: the gather forward and the scatter-add backward into dense
// gradients (ops/embedding.h's cores).
#include "ops/embedding.h"

#include "base/error.h"
#include "numerics/cast.h"

#include <algorithm>
#include <omp.h>

namespace fp8kit::ops {

namespace {

// Checks the sizes and every id; returns the vocabulary size.
int64_t check_ids(std::span<const int32_t> tokens, int64_t seq, int64_t dim, size_t table_size, size_t position_size,
                  size_t rows_size, std::string_view rows_what) {
  FP8KIT_CHECK(seq > 0 && dim > 0 && static_cast<int64_t>(tokens.size()) % seq == 0 && table_size % dim == 0 &&
                   (position_size == 0 || static_cast<int64_t>(position_size) == seq * dim) &&
                   static_cast<int64_t>(rows_size) == static_cast<int64_t>(tokens.size()) * dim,
               "embedding: {} ids of sequence length {}, dim {}: the token table has {} values, the position table "
               "{}, the {} {} (expected a multiple of {}, {} (or 0: none) and {})",
               tokens.size(), seq, dim, table_size, position_size, rows_what, rows_size, dim, seq * dim,
               static_cast<int64_t>(tokens.size()) * dim);
  const int64_t vocabulary = static_cast<int64_t>(table_size) / dim;
  for (size_t i = 0; i < tokens.size(); ++i) {
    FP8KIT_CHECK(tokens[i] >= 0 && tokens[i] < vocabulary,
                 "embedding: token id {} at position {} is outside the vocabulary [0, {}) of the token table: the "
                 "tokenizer's vocabulary must fit the model's",
                 tokens[i], i, vocabulary);
  }
  return vocabulary;
}

}  // namespace

void embedding_gather(std::span<const int32_t> tokens, int64_t seq, int64_t dim, std::span<const float> token_table,
                      std::span<const float> position_table, bool bf16, std::span<float> out) {
  check_ids(tokens, seq, dim, token_table.size(), position_table.size(), out.size(), "output");
  const int64_t T = seq, D = dim, rows = static_cast<int64_t>(tokens.size());
  const float* tok = token_table.data();
  const float* pos = position_table.empty() ? nullptr : position_table.data();
  float* o = out.data();
#pragma omp parallel for schedule(static) if (rows * D >= 65536)
  for (int64_t bt = 0; bt < rows; ++bt) {
    const float* tr = tok + static_cast<int64_t>(tokens[bt]) * D;
    float* ob = o + bt * D;
    if (pos == nullptr) {
      for (int64_t d = 0; d < D; ++d) ob[d] = bf16 ? round_bf16(tr[d]) : tr[d];
      continue;
    }
    const float* pr = pos + (bt % T) * D;
    for (int64_t d = 0; d < D; ++d) ob[d] = bf16 ? round_bf16(round_bf16(tr[d]) + round_bf16(pr[d])) : tr[d] + pr[d];
  }
}

void embedding_scatter(std::span<const int32_t> tokens, int64_t seq, int64_t dim, std::span<const float> dout,
                       std::span<float> token_grad, std::span<float> position_grad) {
  const int64_t vocabulary =
      check_ids(tokens, seq, dim, token_grad.size(), position_grad.size(), dout.size(), "gradient");
  const int64_t T = seq, D = dim, rows = static_cast<int64_t>(tokens.size());
  float* tg = token_grad.data();
  float* pg = position_grad.empty() ? nullptr : position_grad.data();
  const int32_t* ids = tokens.data();
  // Threads own disjoint slices of the embedding dimension, so the scatter-add has no conflicts
  // and every element is summed in batch order whatever the thread count.
#pragma omp parallel if (rows * D >= 65536)
  {
    const int t = omp_get_thread_num(), nt = omp_get_num_threads();
    const int64_t d0 = D * t / nt, d1 = D * (t + 1) / nt;
    for (int64_t v = 0; v < vocabulary; ++v) std::fill(tg + v * D + d0, tg + v * D + d1, 0.0f);
    if (pg != nullptr)
      for (int64_t p = 0; p < T; ++p) std::fill(pg + p * D + d0, pg + p * D + d1, 0.0f);
    for (int64_t bt = 0; bt < rows; ++bt) {
      float* tr = tg + static_cast<int64_t>(ids[bt]) * D;
      const float* g = dout.data() + bt * D;
      for (int64_t d = d0; d < d1; ++d) tr[d] += g[d];
      if (pg == nullptr) continue;
      float* pr = pg + (bt % T) * D;
      for (int64_t d = d0; d < d1; ++d) pr[d] += g[d];
    }
  }
}

}  // namespace fp8kit::ops
