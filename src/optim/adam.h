// Adam exactly as Keras 3 applies it (dense updates of every element, float32 state):
//   m += (g - m) (1 - b1);  v += (g^2 - v) (1 - b2);
//   alpha = lr sqrt(1 - b2^t) / (1 - b1^t);  w -= alpha m / (sqrt(v) + eps),  t = iterations + 1.
#pragma once

#include "nn/parameter.h"
#include "ops/adam.h"

#include <cstdint>
#include <vector>

namespace fp8kit::optim {

using AdamOptions = ops::AdamOptions;  // learning rate, beta1, beta2, epsilon (Keras's defaults)

class Adam {
 public:
  // The parameters must outlive the optimizer; their order fixes the order of state().
  explicit Adam(std::vector<nn::Parameter*> parameters, AdamOptions options = {});

  // One update of every parameter from its current grad.
  void step();
  int64_t iterations() const { return static_cast<int64_t>(iterations_[0]); }
  const AdamOptions& options() const { return options_; }

  // "<param name>/m" and "<param name>/v" per parameter (parameter shape; v non-negative), then
  // "iterations" (shape {}, stored as float: exact up to 2^24 steps, a Domain::Count). Writable
  // views, for checkpoint restore.
  std::vector<nn::StateEntry> state();

 private:
  std::vector<nn::Parameter*> parameters_;
  AdamOptions options_;
  std::vector<std::vector<float>> m_, v_;
  std::vector<float> iterations_ = {0.0f};
};

}  // namespace fp8kit::optim
