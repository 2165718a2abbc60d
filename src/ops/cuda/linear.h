// The CUDA implementation of ops/linear.h (called by its dispatch after the argument checks).
#pragma once

#include "ops/cuda/linear_epilogue.h"
#include "ops/linear.h"

namespace fp8kit::ops {

void cuda_linear_prepare_weights(Context& c, std::span<LinearOp* const> linears, bool training);
void cuda_linear_prepare_input(Context& c, LinearOp& l, const Tensor& x, bool training);
// gated: x is its gate, fused into the input's cast (a bf16 or FP8 Linear of its own input).
void cuda_linear_forward(Context& c, LinearOp& l, const Tensor& x, bool training, const LinearOutput& next,
                         LinearOp* producer, const GatedInput* gated);
void cuda_linear_finish(Context& c, std::span<LinearOp* const> linears);
// Into bf16 copies outs[i], sized by the caller.
void cuda_linear_finish(Context& c, std::span<LinearOp* const> linears, std::span<Tensor* const> outs);
// A deferred output's bias and activation as a kernel's epilogue on l.y (for ops that fuse them).
cuda::LinearEpilogue deferred_epilogue(LinearOp& l);
void cuda_linear_backward(Context& c, std::span<const LinearGradient> group);

}  // namespace fp8kit::ops
