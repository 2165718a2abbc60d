// Adam's update on the CPU (ops/adam.h): one vectorised pass, split into chunks across threads.
#include "ops/adam.h"

#include "base/error.h"

#include <algorithm>
#include <cmath>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace fp8kit::ops {

namespace {

// Elements [begin, end). The AVX2 path does the same float32 operations in the same order as the
// scalar one (no fused multiply-add), so both give identical bits.
void update(float* w, const float* g, float* m, float* v, int64_t begin, int64_t end, const AdamCoefficients& c) {
  int64_t i = begin;
#if defined(__AVX2__)
  const __m256 c1 = _mm256_set1_ps(c.one_minus_b1), c2 = _mm256_set1_ps(c.one_minus_b2),
               alpha = _mm256_set1_ps(c.alpha), eps = _mm256_set1_ps(c.epsilon), decay = _mm256_set1_ps(c.decay);
  for (; i + 8 <= end; i += 8) {
    const __m256 gi = _mm256_loadu_ps(g + i);
    const __m256 mi = _mm256_add_ps(_mm256_loadu_ps(m + i), _mm256_mul_ps(_mm256_sub_ps(gi, _mm256_loadu_ps(m + i)), c1));
    const __m256 vi = _mm256_add_ps(_mm256_loadu_ps(v + i),
                                    _mm256_mul_ps(_mm256_sub_ps(_mm256_mul_ps(gi, gi), _mm256_loadu_ps(v + i)), c2));
    const __m256 step = _mm256_div_ps(_mm256_mul_ps(mi, alpha), _mm256_add_ps(_mm256_sqrt_ps(vi), eps));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    _mm256_storeu_ps(w + i, _mm256_sub_ps(_mm256_mul_ps(_mm256_loadu_ps(w + i), decay), step));
  }
#endif
  for (; i < end; ++i) {
    m[i] = m[i] + (g[i] - m[i]) * c.one_minus_b1;
    v[i] = v[i] + (g[i] * g[i] - v[i]) * c.one_minus_b2;
    w[i] = w[i] * c.decay - (m[i] * c.alpha) / (std::sqrt(v[i]) + c.epsilon);
  }
}

}  // namespace

void check_adam_options(const AdamOptions& options) {
  FP8KIT_CHECK(options.learning_rate >= 0.0f, "learning rate must be >= 0, got {}", options.learning_rate);
  FP8KIT_CHECK(options.beta1 >= 0.0f && options.beta1 < 1.0f && options.beta2 >= 0.0f && options.beta2 < 1.0f,
               "Adam betas must be in [0, 1), got {} and {}", options.beta1, options.beta2);
  FP8KIT_CHECK(options.weight_decay >= 0.0f && std::isfinite(options.weight_decay),
               "weight decay must be a finite value >= 0, got {}", options.weight_decay);
  FP8KIT_CHECK(options.warmup_steps >= 0, "warmup steps must be >= 0, got {}", options.warmup_steps);
  FP8KIT_CHECK(options.decay_steps == 0 || options.decay_steps > options.warmup_steps,
               "decay steps must be 0 (no decay) or more than the warmup steps ({}), got {}", options.warmup_steps,
               options.decay_steps);
  FP8KIT_CHECK(options.min_lr_ratio >= 0.0f && options.min_lr_ratio <= 1.0f,
               "the minimum learning-rate ratio must be in [0, 1], got {}", options.min_lr_ratio);
}

AdamCoefficients adam_coefficients(const AdamOptions& options, float t) {
  const float b1 = options.beta1, b2 = options.beta2;
  // Without a schedule lr_t is learning_rate exactly (times 1.0 in double, rounded back).
  const float lr = static_cast<float>(scheduled_learning_rate(options, t));
  // Keras: alpha = lr * sqrt(1 - b2^t) / (1 - b1^t), in float32.
  const float alpha = lr * std::sqrt(1.0f - std::pow(b2, t)) / (1.0f - std::pow(b1, t));
  // decay as one fused multiply-add (the GPU's), whatever the compiler contracts; exactly 1 without decay.
  return {1.0f - b1, 1.0f - b2, alpha, options.epsilon, std::fma(-lr, options.weight_decay, 1.0f)};
}

void adam_update(const AdamCoefficients& coefficients, float* w, const float* g, float* m, float* v, int64_t n) {
  constexpr int64_t kChunk = 8192;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= 65536)
  for (int64_t k = 0; k < chunks; ++k) update(w, g, m, v, k * kChunk, std::min(n, (k + 1) * kChunk), coefficients);
}

}  // namespace fp8kit::ops
