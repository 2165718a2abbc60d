// Adam exactly as Keras 3 applies it (dense updates of every element, float32 state):
//   m += (g - m) (1 - b1);  v += (g^2 - v) (1 - b2);
//   alpha = lr sqrt(1 - b2^t) / (1 - b1^t);  w -= alpha m / (sqrt(v) + eps),  t = iterations + 1.
// The moments are laid out as the parameters' flat buffers, on their device, so a step is one op
// over all of them (ops/adam.h); or, sharded (ZeRO-1), over a process's shard of those buffers, gathered
// into tensors of its own.
#pragma once

#include "nn/parameter.h"
#include "ops/adam.h"
#include "ops/context.h"

#include <cstdint>
#include <vector>

namespace fp8kit::optim {

using AdamOptions = ops::AdamOptions;  // learning rate, betas, epsilon (Keras's defaults), weight decay, schedule

class Adam {
 public:
  // The parameters must be allocated (on their device) and outlive the optimizer; their order fixes
  // the order of state().
  explicit Adam(nn::ParameterSet& parameters, AdamOptions options = {});
  // ZeRO-1's shard: step() updates `values` (some elements of a model's flat parameter buffer, in a
  // flat f32 tensor of their own) from `grads` (theirs, the same shape), the first `decayed` of them
  // with the weight decay; the moments are these elements' alone. Both must outlive the optimizer.
  Adam(Tensor& values, const Tensor& grads, int64_t decayed, AdamOptions options);

  // One update of every parameter from its current grad, queued on c (the parameters' device);
  // advance_step: the context's step moves on with it (the end of a training step).
  void step(ops::Context& c, bool advance_step = false);
  // The updates made so far (read from the device: waits for queued work there).
  int64_t iterations() const;
  const AdamOptions& options() const { return options_; }

  // "<param name>/m" and "<param name>/v" per parameter (parameter shape; v non-negative), then
  // "iterations" (shape {}, stored as float: exact up to 2^24 steps, a Domain::Count), on the
  // parameters' device. Writable, for checkpoint restore.
  // Unsharded only: a sharded optimizer's checkpoint gathers the shards into full moments first.
  std::vector<nn::StateTensor> state();

  // The moments, laid out as the values the optimizer updates (the flat buffers unless sharded).
  Tensor& m() { return m_; }
  Tensor& v() { return v_; }
  Tensor& iterations_tensor() { return iterations_; }

 private:
  nn::ParameterSet* parameters_ = nullptr;  // unless sharded
  Tensor& values_;
  const Tensor& grads_;
  int64_t decayed_;
  AdamOptions options_;
  Tensor m_, v_, iterations_;  // values_'s shape; [1]
  std::vector<Tensor> views_;  // state()'s
};

// state()'s entries ("<param name>/m", "<param name>/v", "iterations") over moments m and v laid out
// as `parameters`' flat buffers; `views` keeps the per-parameter views (made once).
std::vector<nn::StateTensor> adam_state(nn::ParameterSet& parameters, Tensor& m, Tensor& v, Tensor& iterations,
                                        std::vector<Tensor>& views);

}  // namespace fp8kit::optim
