// Shape helpers for parameters and state views, and the domains of state values.
#include "nn/parameter.h"

#include "base/error.h"

#include <algorithm>
#include <cmath>

namespace fp8kit::nn {

int64_t numel(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

Parameter& ParameterSet::add(std::string name, std::vector<int64_t> shape, float initial, bool decayed) {
  FP8KIT_CHECK(offsets_.empty(), "parameter {} added after the parameters were allocated", name);
  parameters_.push_back({std::move(name), std::move(shape), Tensor(), Tensor(), decayed});
  initial_.push_back(initial);
  return parameters_.back();
}

void ParameterSet::allocate(Device device) {
  constexpr int64_t kAlign = 64;  // floats: 256 bytes
  if (offsets_.empty()) {
    int64_t total = 0;
    offsets_.resize(parameters_.size());
    for (const bool decayed : {true, false}) {
      for (size_t i = 0; i < parameters_.size(); ++i) {
        if (parameters_[i].decayed != decayed) continue;
        offsets_[i] = total;
        total = (total + numel(parameters_[i].shape) + kAlign - 1) / kAlign * kAlign;
      }
      if (decayed) decayed_end_ = total;
    }
    Tensor values({total}, DType::F32);
    for (size_t i = 0; i < parameters_.size(); ++i)
      std::fill_n(values.data<float>() + offsets_[i], numel(parameters_[i].shape), initial_[i]);
    values_ = values.to(device);
    grads_ = Tensor({total}, DType::F32, device);
  } else {
    values_ = values_.to(device);
    grads_ = grads_.to(device);
  }
  for (size_t i = 0; i < parameters_.size(); ++i) {
    Parameter& p = parameters_[i];
    p.value = values_.view(offsets_[i], p.shape);
    p.grad = grads_.view(offsets_[i], p.shape);
  }
}

std::vector<Parameter*> ParameterSet::parameters() {
  std::vector<Parameter*> out;
  for (Parameter& p : parameters_) out.push_back(&p);
  return out;
}

std::vector<const Parameter*> ParameterSet::parameters() const {
  std::vector<const Parameter*> out;
  for (const Parameter& p : parameters_) out.push_back(&p);
  return out;
}

int64_t ParameterSet::count() const {
  int64_t n = 0;
  for (const Parameter& p : parameters_) n += numel(p.shape);
  return n;
}

HostState::HostState(std::vector<StateTensor> tensors) : tensors_(std::move(tensors)) {
  for (const StateTensor& t : tensors_) {
    FP8KIT_CHECK(t.tensor->dtype() == DType::F32 && t.tensor->numel() == numel(t.shape),
                 "state tensor {} must be f32 of {} values", t.name, numel(t.shape));
    Tensor copy;
    if (t.tensor->device() != Device::Cpu) copy = t.tensor->to(Device::Cpu);
    Tensor& host = copy.numel() > 0 ? copy : *t.tensor;
    entries_.push_back({t.name, t.shape, host.span<float>(), t.domain});
    copies_.push_back(std::move(copy));
  }
}

void HostState::pull() {
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (copies_[i].numel() > 0) copies_[i].copy_from(*tensors_[i].tensor);
}

void HostState::push() {
  for (size_t i = 0; i < tensors_.size(); ++i)
    if (copies_[i].numel() > 0) tensors_[i].tensor->copy_from(copies_[i]);
}

std::vector<StateTensor> state_tensors(std::span<const ops::ScalingStateView> views) {
  std::vector<StateTensor> tensors;
  for (const ops::ScalingStateView& v : views)
    tensors.push_back({v.name, v.shape, v.tensor, v.history ? Domain::NonNegative : Domain::Positive});
  return tensors;
}

std::string_view requirement(Domain domain) {
  switch (domain) {
    case Domain::Finite: return "finite";
    case Domain::NonNegative: return "finite and non-negative";
    case Domain::Positive: return "finite and positive";
    case Domain::Count: return "a whole number from 0 to 16777216";
  }
  return "valid";
}

bool in_domain(float value, Domain domain) {
  if (!std::isfinite(value)) return false;
  switch (domain) {
    case Domain::Finite: return true;
    case Domain::NonNegative: return value >= 0.0f;
    case Domain::Positive: return value > 0.0f;
    case Domain::Count: return value >= 0.0f && value <= 16777216.0f && value == std::floor(value);
  }
  return false;
}

}  // namespace fp8kit::nn
