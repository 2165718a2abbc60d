// Adam with Keras 3's update order and bias correction; one vectorised pass per parameter.
#include "optim/adam.h"

#include "base/error.h"

#include <algorithm>
#include <cmath>
#if defined(__AVX2__)
#include <immintrin.h>
#endif

namespace fp8kit::optim {

namespace {

struct Coefficients {
  float one_minus_b1, one_minus_b2, alpha, epsilon;
};

// Elements [begin, end) of one parameter. The AVX2 path does the same float32 operations in the
// same order as the scalar one (no fused multiply-add), so both give identical bits.
void update(float* w, const float* g, float* m, float* v, int64_t begin, int64_t end, const Coefficients& c) {
  int64_t i = begin;
#if defined(__AVX2__)
  const __m256 c1 = _mm256_set1_ps(c.one_minus_b1), c2 = _mm256_set1_ps(c.one_minus_b2),
               alpha = _mm256_set1_ps(c.alpha), eps = _mm256_set1_ps(c.epsilon);
  for (; i + 8 <= end; i += 8) {
    const __m256 gi = _mm256_loadu_ps(g + i);
    const __m256 mi = _mm256_add_ps(_mm256_loadu_ps(m + i), _mm256_mul_ps(_mm256_sub_ps(gi, _mm256_loadu_ps(m + i)), c1));
    const __m256 vi = _mm256_add_ps(_mm256_loadu_ps(v + i),
                                    _mm256_mul_ps(_mm256_sub_ps(_mm256_mul_ps(gi, gi), _mm256_loadu_ps(v + i)), c2));
    const __m256 step = _mm256_div_ps(_mm256_mul_ps(mi, alpha), _mm256_add_ps(_mm256_sqrt_ps(vi), eps));
    _mm256_storeu_ps(m + i, mi);
    _mm256_storeu_ps(v + i, vi);
    _mm256_storeu_ps(w + i, _mm256_sub_ps(_mm256_loadu_ps(w + i), step));
  }
#endif
  for (; i < end; ++i) {
    m[i] = m[i] + (g[i] - m[i]) * c.one_minus_b1;
    v[i] = v[i] + (g[i] * g[i] - v[i]) * c.one_minus_b2;
    w[i] = w[i] - (m[i] * c.alpha) / (std::sqrt(v[i]) + c.epsilon);
  }
}

}  // namespace

Adam::Adam(std::vector<nn::Parameter*> parameters, AdamOptions options)
    : parameters_(std::move(parameters)), options_(options) {
  FP8KIT_CHECK(options.learning_rate >= 0.0f, "learning rate must be >= 0, got {}", options.learning_rate);
  FP8KIT_CHECK(options.beta1 >= 0.0f && options.beta1 < 1.0f && options.beta2 >= 0.0f && options.beta2 < 1.0f,
               "Adam betas must be in [0, 1), got {} and {}", options.beta1, options.beta2);
  for (const nn::Parameter* p : parameters_) {
    FP8KIT_CHECK(p->grad.size() == p->value.size(), "parameter {} has {} values but {} gradients", p->name,
                 p->value.size(), p->grad.size());
    m_.emplace_back(p->value.size(), 0.0f);
    v_.emplace_back(p->value.size(), 0.0f);
  }
}

void Adam::step() {
  const float t = iterations_[0] + 1.0f;
  const float b1 = options_.beta1, b2 = options_.beta2;
  // Keras: alpha = lr * sqrt(1 - b2^t) / (1 - b1^t), in float32.
  const float alpha = options_.learning_rate * std::sqrt(1.0f - std::pow(b2, t)) / (1.0f - std::pow(b1, t));
  const Coefficients c{1.0f - b1, 1.0f - b2, alpha, options_.epsilon};
  constexpr int64_t kChunk = 8192;
  for (size_t p = 0; p < parameters_.size(); ++p) {
    float* w = parameters_[p]->value.data();
    const float* g = parameters_[p]->grad.data();
    float* m = m_[p].data();
    float* v = v_[p].data();
    const int64_t n = static_cast<int64_t>(m_[p].size());
    const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= 65536)
    for (int64_t k = 0; k < chunks; ++k) update(w, g, m, v, k * kChunk, std::min(n, (k + 1) * kChunk), c);
  }
  iterations_[0] = t;
}

std::vector<nn::StateEntry> Adam::state() {
  std::vector<nn::StateEntry> entries;
  for (size_t p = 0; p < parameters_.size(); ++p) {
    entries.push_back({parameters_[p]->name + "/m", parameters_[p]->shape, m_[p]});
    entries.push_back({parameters_[p]->name + "/v", parameters_[p]->shape, v_[p], nn::Domain::NonNegative});
  }
  entries.push_back({"iterations", {}, iterations_, nn::Domain::Count});
  return entries;
}

}  // namespace fp8kit::optim
