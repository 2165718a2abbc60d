// Adam over a ParameterSet's flat buffers: one op per step.
#include "optim/adam.h"

namespace fp8kit::optim {

Adam::Adam(nn::ParameterSet& parameters, AdamOptions options) : parameters_(parameters), options_(options) {
  ops::check_adam_options(options);
  const Device device = parameters.device();
  m_ = Tensor(parameters.values().shape(), DType::F32, device);
  v_ = Tensor(parameters.values().shape(), DType::F32, device);
  iterations_ = Tensor({1}, DType::F32, device);
}

void Adam::step(ops::Context& c, bool advance_step) {
  ops::adam_step(c, options_, iterations_, parameters_.values(), parameters_.grads(), m_, v_, advance_step,
                 parameters_.decayed_end());
}

int64_t Adam::iterations() const { return static_cast<int64_t>(iterations_.to(Device::Cpu).data<float>()[0]); }

std::vector<nn::StateTensor> Adam::state() {
  const std::vector<nn::Parameter*> ps = parameters_.parameters();
  if (views_.empty()) {  // made once, so that every state() hands out the same views
    for (size_t i = 0; i < ps.size(); ++i) {
      views_.push_back(m_.view(parameters_.offset(i), ps[i]->shape));
      views_.push_back(v_.view(parameters_.offset(i), ps[i]->shape));
    }
  }
  std::vector<nn::StateTensor> entries;
  for (size_t i = 0; i < ps.size(); ++i) {
    entries.push_back({ps[i]->name + "/m", ps[i]->shape, &views_[2 * i], nn::Domain::Finite});
    entries.push_back({ps[i]->name + "/v", ps[i]->shape, &views_[2 * i + 1], nn::Domain::NonNegative});
  }
  entries.push_back({"iterations", {}, &iterations_, nn::Domain::Count});
  return entries;
}

}  // namespace fp8kit::optim
