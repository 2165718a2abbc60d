// Adam over a ParameterSet's flat buffers: one op per step.
#include "optim/adam.h"

#include "base/error.h"

namespace fp8kit::optim {

Adam::Adam(nn::ParameterSet& parameters, AdamOptions options)
    : Adam(parameters.values(), parameters.grads(), parameters.decayed_end(), options) {
  parameters_ = &parameters;
}

Adam::Adam(Tensor& values, const Tensor& grads, int64_t decayed, AdamOptions options)
    : values_(values), grads_(grads), decayed_(decayed), options_(options) {
  ops::check_adam_options(options);
  FP8KIT_CHECK(0 <= decayed && decayed <= values.numel(), "Adam: {} decayed elements of {} values", decayed,
               values.numel());
  m_ = Tensor({values.numel()}, DType::F32, values.device());
  v_ = Tensor({values.numel()}, DType::F32, values.device());
  iterations_ = Tensor({1}, DType::F32, values.device());
}

void Adam::step(ops::Context& c, bool advance_step) {
  ops::adam_step(c, options_, iterations_, values_, grads_, m_, v_, advance_step, decayed_);
}

int64_t Adam::iterations() const { return static_cast<int64_t>(iterations_.to(Device::Cpu).data<float>()[0]); }

std::vector<nn::StateTensor> Adam::state() {
  FP8KIT_CHECK(parameters_ != nullptr,
               "a sharded Adam's state is its shard: gather the shards into full moments (adam_state) instead");
  return adam_state(*parameters_, m_, v_, iterations_, views_);
}

std::vector<nn::StateTensor> adam_state(nn::ParameterSet& parameters, Tensor& m, Tensor& v, Tensor& iterations,
                                        std::vector<Tensor>& views) {
  const std::vector<nn::Parameter*> ps = parameters.parameters();
  if (views.empty()) {  // made once, so that every call hands out the same views
    for (size_t i = 0; i < ps.size(); ++i) {
      views.push_back(m.view(parameters.offset(i), ps[i]->shape));
      views.push_back(v.view(parameters.offset(i), ps[i]->shape));
    }
  }
  std::vector<nn::StateTensor> entries;
  for (size_t i = 0; i < ps.size(); ++i) {
    entries.push_back({ps[i]->name + "/m", ps[i]->shape, &views[2 * i], nn::Domain::Finite});
    entries.push_back({ps[i]->name + "/v", ps[i]->shape, &views[2 * i + 1], nn::Domain::NonNegative});
  }
  entries.push_back({"iterations", {}, &iterations, nn::Domain::Count});
  return entries;
}

}  // namespace fp8kit::optim
