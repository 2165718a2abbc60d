// RMSNorm over the last axis on the GPU, float32 statistics (ops/cpu/rms_norm.h's semantics:
// out = (x rstd) weight, rstd = 1 / sqrt(mean(x^2) + eps)). Device pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/activation_out.h"

namespace fp8kit::cuda {

// x, out: [rows, dim]; weight: [dim]; rstd: [rows] saved for the backward. A block per row; the row's
// sum of squares is a block tree (~1e-6 relative of the CPU's sequential sum).
void rms_norm_forward(int64_t rows, int64_t dim, float eps, const float* x, const float* weight, bool bf16_out,
                      float* out, float* rstd, cudaStream_t stream);
// dx [rows, dim] and dweight [dim] overwritten (dx must not alias x, dout or residual); residual (null:
// none) is added to dx, rounded once. dweight is summed in exactly ops::cpu::rms_norm_backward_weight's
// order: the CPU's bits given the same rstd. workspace: rms_norm_backward_workspace(rows, dim) floats of
// device scratch.
void rms_norm_backward(int64_t rows, int64_t dim, const float* x, const float* weight, const float* rstd,
                       const float* dout, const float* residual, float* dx, float* dweight, float* workspace,
                       cudaStream_t stream);
int64_t rms_norm_backward_workspace(int64_t rows, int64_t dim);

// Inference's residual step (ops::add_rms_norm): residual [rows, dim] bf16 += delta [rows, dim] bf16
// (null: none) rounded to bf16 in place, then out = bf16((residual rstd) weight) written as `out` says.
// A block per row holding the row in registers (dim <= 32768; 16-byte loads where dim % 8 == 0 and
// the rows are aligned), at few rows a cluster of blocks; the sum of squares is a block tree (of the
// same threads in the same order either way).
void add_rms_norm(int64_t rows, int64_t dim, float eps, uint16_t* residual, const uint16_t* delta, const float* weight,
                  const ActivationOutArgs& out, cudaStream_t stream);

}  // namespace fp8kit::cuda
