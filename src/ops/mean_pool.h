// Mean pooling over the sequence axis with the dropout that follows it fused in, and its gradient, on
// Tensors on either device. CPU: ops/cpu/mean_pool.h then the dropout span functions; GPU:
// ops/cuda/mean_pool.h (one launch each way). The same bits on both (the sum runs in sequence order).
#pragma once

#include "ops/context.h"
#include "ops/dropout.h"
#include "tensor/tensor.h"

namespace fp8kit::ops {

// x [batch, seq, dim] (f32, seq >= 1) -> out [batch, dim] = dropout_forward(spec, bf16, sum over seq /
// seq): the mean summed in float32 in sequence order, rounded to bf16 when bf16, then the dropout of
// spec (elements indexed over [batch, dim]; inactive: the mean itself). out is resized.
void mean_pool_forward(Context& c, const Tensor& x, bool bf16, const DropoutSpec& spec, Tensor& out);
// dout [batch, dim]: the gradient of the forward's out (of the dropout output when spec is active;
// bf16: its keep probability as in bf16, as the forward's) -> dx [batch, seq, dim] =
// dropout_backward(spec, bf16, dout)[b, :] / seq (seq: the forward's x.dim(1)). dx is resized.
void mean_pool_backward(Context& c, const Tensor& dout, int64_t seq, bool bf16, const DropoutSpec& spec, Tensor& dx);

}  // namespace fp8kit::ops
