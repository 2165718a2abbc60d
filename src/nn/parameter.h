// Trainable parameters (float32 master value + gradient, Tensors on the model's device, all of a
// model's in one flat buffer), named float32 tensors of other state (optimizer moments, FP8 scales and
// amax histories) for checkpoints and inspection, and host views of them for the checkpoint files.
#pragma once

#include "ops/scaling_table.h"
#include "tensor/tensor.h"

#include <deque>

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fp8kit::nn {

// Names are Keras-like variable paths ("transformer_decoder/self_attention/query/kernel"); shapes
// are Keras's (a query kernel is {32, 2, 16}); value and grad are row-major, numel(shape) long.
struct Parameter {
  std::string name;
  std::vector<int64_t> shape;
  Tensor value;  // f32 of `shape`, a view of the ParameterSet's flat values
  Tensor grad;   // the same in the gradient buffer
  bool decayed = true;  // takes AdamW's weight decay (norm scales do not: Hugging Face's Trainer's rule)

  int64_t numel() const { return value.numel(); }
};

// A model's parameters in registration order, every one a view of two flat buffers (values and
// gradients, each parameter at a 256-byte aligned offset, the gaps zero), so that one launch updates
// them all: the decayed parameters first, then the others (each group in registration order), so
// that the weight decay covers one prefix of the buffers. Layers add() theirs when constructed and
// keep the references (stable).
class ParameterSet {
 public:
  // A parameter whose every element starts at `initial` (before a model's initialiser runs).
  Parameter& add(std::string name, std::vector<int64_t> shape, float initial = 0.0f, bool decayed = true);
  // The buffers on `device`, zero-filled (first call), or moved there with their values (later calls).
  void allocate(Device device);
  Device device() const { return values_.device(); }
  std::vector<Parameter*> parameters();
  std::vector<const Parameter*> parameters() const;
  int64_t count() const;  // of parameter values (without the gaps)
  Tensor& values() { return values_; }
  Tensor& grads() { return grads_; }
  // Where each parameter starts in the flat buffers (elements).
  int64_t offset(size_t index) const { return offsets_.at(index); }
  // The flat buffers' elements before this one belong to decayed parameters (after allocate()).
  int64_t decayed_end() const { return decayed_end_; }

 private:
  std::deque<Parameter> parameters_;
  std::vector<float> initial_;
  std::vector<int64_t> offsets_;
  int64_t decayed_end_ = 0;
  Tensor values_, grads_;
};

// The values a state entry can hold by its meaning; checkpoints holding any other are refused.
enum class Domain {
  Finite,       // weights, Adam's first moment
  NonNegative,  // finite and >= 0: Adam's second moment, amax histories
  Positive,     // finite and > 0: FP8 scales
  Count,        // a whole number in [0, 2^24] (exact in float32): Adam's iterations
};

// What `domain` requires, for messages: "finite", "finite and non-negative", ...
std::string_view requirement(Domain domain);
// Whether `value` lies in `domain`.
bool in_domain(float value, Domain domain);

// A named float32 tensor of a model's state on any device (a view its owner keeps); shape {} is a
// scalar (tensor of one element).
struct StateTensor {
  std::string name;
  std::vector<int64_t> shape;
  Tensor* tensor;
  Domain domain = Domain::Finite;
};

// A named, non-owning float32 view of host memory (what checkpoint files are read into and written
// from); shape {} is a scalar. Valid while its owner lives and is not
// reconfigured (e.g. SeedClassifier::set_precision invalidates FP8 state views).
struct StateEntry {
  std::string name;
  std::vector<int64_t> shape;
  std::span<float> data;
  Domain domain = Domain::Finite;
};

// Host views of state tensors, for checkpoint files: a CPU tensor's own memory; for a GPU tensor a
// host copy that pull() fills from the device and push() writes back.
class HostState {
 public:
  explicit HostState(std::vector<StateTensor> tensors);
  const std::vector<StateEntry>& entries() const { return entries_; }
  void pull();  // device -> host copies
  void push();  // host copies -> device

 private:
  std::vector<StateTensor> tensors_;
  std::vector<Tensor> copies_;  // per tensor: its host copy, or empty for a CPU tensor
  std::vector<StateEntry> entries_;
};

// The FP8 scaling table's state as named tensors (scales positive, amax histories non-negative).
std::vector<StateTensor> state_tensors(std::span<const ops::ScalingStateView> views);

// Product of the dims (1 for a scalar).
int64_t numel(std::span<const int64_t> shape);

}  // namespace fp8kit::nn
