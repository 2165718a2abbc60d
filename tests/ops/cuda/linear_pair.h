// Two GPU Linears of one input for the Linear op's GPU tests: [in -> out] each, stored OutIn, random
// weights in [-0.3, 0.3] (seeds seed and seed + 1) and, when biased, random biases (seed + 2 and
// seed + 3), FP8 slots in a scaling table of their own, weights prepared for a training step.
#pragma once

#include "ops/cuda/op_table.h"
#include "ops/linear.h"
#include "ops/scaling_table.h"

#include <array>
#include <deque>
#include <optional>
#include <string>

namespace fp8kit::testing {

struct LinearPair {
  LinearPair(ops::Context& c, int64_t in, int64_t out, ops::LinearPrecision p, ops::Activation act, bool bias,
             uint64_t seed) {
    if (p == ops::LinearPrecision::Fp8) scaling.emplace(Fp8Recipe{});
    for (int k = 0; k < 2; ++k) {
      ops::LinearOp& l = *both[k];
      l.in = in;
      l.out = out;
      l.layout = ops::LinearOp::Layout::OutIn;
      l.precision = p;
      l.activation = act;
      l.w = &params.emplace_back(device_tensor(random_values(in * out, seed + k, -0.3f, 0.3f), {out, in}, Device::Cuda));
      l.dw = &params.emplace_back(l.w->shape(), DType::F32, Device::Cuda);
      if (bias) {
        l.b = &params.emplace_back(device_tensor(random_values(out, seed + 2 + k), {out}, Device::Cuda));
        l.db = &params.emplace_back(l.b->shape(), DType::F32, Device::Cuda);
      }
      if (scaling) {
        l.scaling = &*scaling;
        l.slot = scaling->add_linear("l" + std::to_string(k));
      }
    }
    if (scaling) scaling->allocate(Device::Cuda);
    ops::linear_prepare_weights(c, both, true);
  }
  LinearPair(const LinearPair&) = delete;  // the ops point into it
  LinearPair& operator=(const LinearPair&) = delete;

  ops::LinearOp a, b;
  std::array<ops::LinearOp*, 2> both{&a, &b};
  std::deque<Tensor> params;  // weights, biases and their gradients
  std::optional<ops::ScalingTable> scaling;
};

}  // namespace fp8kit::testing
