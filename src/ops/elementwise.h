// Element-wise ops on Tensors on either device: a copy in stream order, f32 <-> bf16, a residual sum,
// and the gradient that flows into a dropout from a residual branch and the Linears it feeds. CPU:
// ops/cpu/elementwise.h (with the dropout span functions); GPU: ops/cuda/elementwise.h. The same bits
// on both.
#pragma once

#include "ops/context.h"
#include "ops/dropout.h"
#include "tensor/tensor.h"

#include <span>

namespace fp8kit::ops {

// dst = src (same dtype and element count), queued in order with the context's other ops (unlike
// Tensor::copy_from, which waits): e.g. inside a captured step.
void copy(Context& c, const Tensor& src, Tensor& dst);

// out = src in `dtype`, F32 or Bf16: an f32 tensor's values rounded to nearest even bf16 (a bf16
// operand of an op that reads bf16), a bf16 one's exactly as f32 (a result back into a float32 step);
// the same dtype is a copy. out is resized to src's shape (not src itself).
void convert(Context& c, const Tensor& src, DType dtype, Tensor& out);

// out = a + b (f32, the same shape), rounded to bf16 when bf16 (a residual connection under mixed
// precision). out is resized to a's shape; it may be a or b.
void add(Context& c, const Tensor& a, const Tensor& b, bool bf16, Tensor& out);

// out = dropout_backward(spec, bf16, a + ((b + c) + d)) for 1 to 3 more tensors `rest` = {&b, &c, &d}
// (f32, a's shape; with fewer: a + b, a + (b + c)), each sum in float32 in that order: the gradient of
// a dropout output that feeds a residual branch (a) and Linears (b, c, d: e.g. query, key, value). The
// CPU seed model computes exactly this: the attention's dx = (dxq + dxk) + dxv, then d_r1 + dx, then
// the embedding dropout's backward. Inactive spec: the sum. out is resized; it may be any input.
void sum_dropout_backward(Context& c, const Tensor& a, std::span<const Tensor* const> rest, bool bf16,
                          const DropoutSpec& spec, Tensor& out);

}  // namespace fp8kit::ops
