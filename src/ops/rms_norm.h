// RMSNorm over the last axis as Hugging Face's LlamaRMSNorm computes it, in float32:
// out = x * rstd * weight with rstd = 1 / sqrt(mean(x^2) + eps), and its gradient, on Tensors on
// either device. CPU core: ops/cpu/rms_norm.h; GPU: ops/cuda/rms_norm.h.
#pragma once

#include "ops/activation_out.h"
#include "ops/context.h"
#include "tensor/tensor.h"

namespace fp8kit::ops {

// x [rows, dim], weight [dim] (f32) -> out [rows, dim] and rstd [rows] (saved for the backward).
// bf16_out rounds out to bf16 (mixed precision; the statistics stay float32). Outputs are resized
// (a default Tensor() becomes one on the context's device). The GPU's row sums differ from the CPU's
// in order only (agreement to ~1e-6 relative).
void rms_norm_forward(Context& c, const Tensor& x, const Tensor& weight, float eps, bool bf16_out, Tensor& out,
                      Tensor& rstd);

// dx [rows, dim] from dout [rows, dim] (resized; a tensor of its own, not x, dout or residual); dweight
// [dim] overwritten with the sum over rows of dout * x * rstd, summed in a fixed order of row pieces
// (ops/piece_order.h, ops::cpu::kRmsNormWeightOrder) on both devices: the same bits given the same rstd.
// residual [rows, dim] (or null): dx = residual + the norm's gradient, each element rounded as ops::add
// rounds it (a pre-norm block's residual stream, added in the same pass on the GPU). GPU workspace: the
// lane's scratch.
void rms_norm_backward(Context& c, const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dout,
                       Tensor& dx, Tensor& dweight, const Tensor* residual = nullptr);

// Inference's residual step and the next norm in one pass: residual, delta [rows, dim] bf16 (delta may
// be null), weight [dim] f32. With delta, residual = bf16(residual + delta) (float32 sum), in place;
// then out = bf16((residual rstd) weight), rstd as rms_norm_forward computes it, written as `out` says
// (fp8: ops::quantize's bytes of that bf16 result). The GPU sums the row's squares as a block tree
// (rms_norm_forward's; its out within a bf16 step of the CPU's) and needs dim <= 32768.
void add_rms_norm(Context& c, Tensor& residual, const Tensor* delta, const Tensor& weight, float eps,
                  const ActivationOut& out);

}  // namespace fp8kit::ops
