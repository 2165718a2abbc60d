// Adam with Keras 3's update order and bias correction; one vectorised pass per parameter.
#include "optim/adam.h"

#include "base/error.h"

#include <cmath>

namespace fp8kit::optim {

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
  const float b1 = options_.beta1, b2 = options_.beta2, eps = options_.epsilon;
  // Keras: alpha = lr * sqrt(1 - b2^t) / (1 - b1^t), in float32.
  const float alpha = options_.learning_rate * std::sqrt(1.0f - std::pow(b2, t)) / (1.0f - std::pow(b1, t));
  const float one_minus_b1 = 1.0f - b1, one_minus_b2 = 1.0f - b2;
  for (size_t p = 0; p < parameters_.size(); ++p) {
    float* w = parameters_[p]->value.data();
    const float* g = parameters_[p]->grad.data();
    float* m = m_[p].data();
    float* v = v_[p].data();
    const int64_t n = static_cast<int64_t>(m_[p].size());
#pragma omp parallel for simd schedule(static) if (n >= 65536)
    for (int64_t i = 0; i < n; ++i) {
      m[i] += (g[i] - m[i]) * one_minus_b1;
      v[i] += (g[i] * g[i] - v[i]) * one_minus_b2;
      w[i] -= (m[i] * alpha) / (std::sqrt(v[i]) + eps);
    }
  }
  iterations_[0] = t;
}

std::vector<nn::StateEntry> Adam::state() {
  std::vector<nn::StateEntry> entries;
  for (size_t p = 0; p < parameters_.size(); ++p) {
    entries.push_back({parameters_[p]->name + "/m", parameters_[p]->shape, m_[p]});
    entries.push_back({parameters_[p]->name + "/v", parameters_[p]->shape, v_[p]});
  }
  entries.push_back({"iterations", {}, iterations_});
  return entries;
}

}  // namespace fp8kit::optim
