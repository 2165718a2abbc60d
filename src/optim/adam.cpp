// Adam over a ParameterSet's flat buffers: one op per step.
#include "optim/adam.h"

#include "base/error.h"

#include <algorithm>

namespace fp8kit::optim {

Adam::Adam(nn::ParameterSet& parameters, AdamOptions options)
    : Adam(parameters, options, 0, parameters.values().numel()) {}

Adam::Adam(nn::ParameterSet& parameters, AdamOptions options, int64_t begin, int64_t end)
    : parameters_(parameters), options_(options), begin_(begin) {
  ops::check_adam_options(options);
  const int64_t n = parameters.values().numel();
  FP8KIT_CHECK(0 <= begin && begin <= end && end <= n, "Adam's shard [{}, {}) is outside the {} parameter elements",
               begin, end, n);
  const Device device = parameters.device();
  m_ = Tensor({end - begin}, DType::F32, device);
  v_ = Tensor({end - begin}, DType::F32, device);
  iterations_ = Tensor({1}, DType::F32, device);
}

void Adam::step(ops::Context& c, bool advance_step) {
  const int64_t n = m_.numel(), decayed = std::clamp<int64_t>(parameters_.decayed_end() - begin_, 0, n);
  Tensor values = parameters_.values().view(begin_, {n});
  const Tensor grads = parameters_.grads().view(begin_, {n});
  ops::adam_step(c, options_, iterations_, values, grads, m_, v_, advance_step, decayed);
}

int64_t Adam::iterations() const { return static_cast<int64_t>(iterations_.to(Device::Cpu).data<float>()[0]); }

std::vector<nn::StateTensor> Adam::state() {
  FP8KIT_CHECK(m_.numel() == parameters_.values().numel(),
               "a sharded Adam's state is its shard: gather the shards into full moments (adam_state) instead");
  return adam_state(parameters_, m_, v_, iterations_, views_);
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
