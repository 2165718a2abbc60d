// LayerNorm over the last axis in float32 (Keras: population variance, out = x inv + (beta - mean inv)
// with inv = gamma / sqrt(var + eps)), and its gradient, on Tensors on either device. The CPU core is
// ops/cpu/layer_norm.h; the GPU's, ops/cuda/layer_norm.h.
#pragma once

#include "ops/context.h"
#include "tensor/tensor.h"

namespace fp8kit::ops {

// x [rows, dim], gamma and beta [dim] (f32) -> out [rows, dim], and mean and rstd [rows] saved for
// the backward. bf16_out rounds the output to bf16 (mixed precision: the statistics stay float32).
// Outputs are resized (a default Tensor() becomes one on the context's device). GPU: the row sums
// are a warp or block tree, so out, mean and rstd agree with the CPU to ~1e-6 relative, not bit for bit.
void layer_norm_forward(Context& c, const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                        bool bf16_out, Tensor& out, Tensor& mean, Tensor& rstd);

// The backward in the two halves that the GPU runs as separate kernels, so that a model can queue the
// parameter half on another lane. The output gradient is dout [rows, dim], or dout + *dout2 (float32,
// added as it is read: the bits of the backward of their sum, as the CPU model's add(..., bf16=false)
// followed by the backward) when dout2 is not null.
// dx [rows, dim] (GPU: within ~1e-5 relative of the CPU; a tensor of its own, not x, dout, dout2 or
// residual); with residual [rows, dim], residual + the norm's gradient, each element rounded as
// ops::add(residual, dx, bf16=false) rounds it (a pre-norm block's residual stream, added in the same
// pass on the GPU).
void layer_norm_backward_dx(Context& c, const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                            const Tensor& dout, const Tensor* dout2, Tensor& dx, const Tensor* residual = nullptr);
// dgamma and dbeta [dim], overwritten: per column, pieces of 256 rows summed row by row (dgamma as
// fma(dout, xhat, sum)), then the pieces in order, on both devices: the same bits given the same mean
// and rstd. GPU workspace: the lane's scratch.
void layer_norm_backward_params(Context& c, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                const Tensor& dout, const Tensor* dout2, Tensor& dgamma, Tensor& dbeta);

}  // namespace fp8kit::ops
