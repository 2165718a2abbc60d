// Picking the next token from a row of logits: greedy (argmax), or sampled with temperature, top-k
// and top-p (nucleus) filtering from a seeded generator, as Hugging Face's generate() does.
#pragma once

#include <cstdint>
#include <random>
#include <span>

namespace fp8kit::infer {

struct SamplingOptions {
  float temperature = 0.0f;  // 0: greedy
  int64_t top_k = 0;         // keep the k most likely tokens (0: all)
  float top_p = 1.0f;        // keep the smallest set whose probability reaches p (1: all)
  uint64_t seed = 0;
};

class Sampler {
 public:
  // Throws unless temperature >= 0, top_k >= 0 and top_p in (0, 1].
  explicit Sampler(const SamplingOptions& options);
  // The next token id for logits [vocab] (finite values; NaN logits throw).
  int32_t next(std::span<const float> logits);

 private:
  SamplingOptions options_;
  std::mt19937_64 rng_;
};

}  // namespace fp8kit::infer
