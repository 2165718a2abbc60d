// The CUDA implementation of ops/linear.h (called by its dispatch after the argument checks).
#pragma once

#include "ops/linear.h"

namespace fp8kit::ops {

void cuda_linear_prepare_weights(Context& c, std::span<LinearOp* const> linears, bool training);
void cuda_linear_prepare_input(Context& c, LinearOp& l, const Tensor& x, bool training);
void cuda_linear_forward(Context& c, LinearOp& l, const Tensor& x, bool training, const LinearOutput& next);
void cuda_linear_backward(Context& c, std::span<const LinearGradient> group);

}  // namespace fp8kit::ops
