// Adam with Keras 3's update order and bias correction: ops/adam.h's CPU update, per parameter.
#include "optim/adam.h"

#include "base/error.h"

namespace fp8kit::optim {

Adam::Adam(std::vector<nn::Parameter*> parameters, AdamOptions options)
    : parameters_(std::move(parameters)), options_(options) {
  ops::check_adam_options(options);
  for (const nn::Parameter* p : parameters_) {
    FP8KIT_CHECK(p->grad.size() == p->value.size(), "parameter {} has {} values but {} gradients", p->name,
                 p->value.size(), p->grad.size());
    m_.emplace_back(p->value.size(), 0.0f);
    v_.emplace_back(p->value.size(), 0.0f);
  }
}

void Adam::step() {
  const float t = iterations_[0] + 1.0f;
  const ops::AdamCoefficients c = ops::adam_coefficients(options_, t);
  for (size_t p = 0; p < parameters_.size(); ++p) {
    ops::adam_update(c, parameters_[p]->value.data(), parameters_[p]->grad.data(), m_[p].data(), v_[p].data(),
                     static_cast<int64_t>(m_[p].size()));
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
