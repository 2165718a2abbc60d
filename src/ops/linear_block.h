// The Linear op's Fp8Block precision (ops/linear.h) on either device, built from the context-queued
// ops::quantize and ops::matmul: DeepSeek-V3's and Transformer Engine's Float8BlockScaling, where
// every scale is a current one of a 1 x 128 group or a 128 x 128 block, so nothing persists.
#pragma once

#include "ops/linear.h"

namespace fp8kit::ops {

// l.wq: W quantized in 128 x 128 blocks as it is stored, with its transposed codes; l.wq_t: the same
// blocks transposed (the other layout's operand).
void linear_block_prepare_weights(Context& c, LinearOp& l);

// l.xq: x quantized 1 x 128 along in; when training also l.xq_t: x^T quantized 1 x 128 along the
// rows, for the wgrad. Sets l.prepared_input (linear_prepare_input's, for Linears sharing x).
void linear_block_prepare_input(Context& c, LinearOp& l, const Tensor& x, bool training);

// l.y [rows, out] f32 = q(x) q(W) (before the bias and activation), from x's quantizations: those of
// l.input_of, or l's own (made first unless prepared).
void linear_block_forward(Context& c, LinearOp& l, const Tensor& x, bool training);

// From g [rows, out] (dy back through the activation and dropout): l.dx = q(g) q(W)^T on the current
// lane (g 1 x 128 along out, W's blocks transposed), then l.dw = q(x)^T q(g) (or its transpose for
// OutIn) on Lane::Side, from x (l.input_of's, where shared) and g quantized 1 x 128 along the rows.
// g is read only on the current lane (its transpose into l.gc_t too), so the caller may overwrite it
// as soon as this returns. input_gradient false: no dx.
void linear_block_backward(Context& c, LinearOp& l, const Tensor& g, bool input_gradient = true);

}  // namespace fp8kit::ops
