// LayerNorm over the last axis on the GPU, float32 statistics (ops/cpu/layer_norm.h's semantics: population
// variance, out = x inv + (beta - mean inv), inv = gamma / sqrt(var + eps)). Device pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fp8kit::cuda {

// x, out: [rows, dim]; gamma, beta: [dim]; mean, rstd: [rows] saved for the backward.
void layer_norm_forward(int64_t rows, int64_t dim, float eps, const float* x, const float* gamma, const float* beta,
                        bool bf16_out, float* out, float* mean, float* rstd, cudaStream_t stream);
// dx [rows, dim], dgamma and dbeta [dim] overwritten. dgamma and dbeta are summed in exactly
// ops::cpu::layer_norm_backward_params's order: the same bits every run, and the CPU's bits given the
// same inputs.
// The output gradient is dout, or dout + dout2 (float32, added as it is read) when dout2 is set: the
// two branches of a residual, without a launch of their own. workspace:
// layer_norm_backward_workspace(rows, dim) floats of device scratch. dim in [1, 2097120]: a warp per row up to
// 256, a block per row beyond.
void layer_norm_backward(int64_t rows, int64_t dim, const float* x, const float* gamma, const float* mean,
                         const float* rstd, const float* dout, const float* dout2, float* dx, float* dgamma,
                         float* dbeta, float* workspace, cudaStream_t stream);
// The two independent halves of layer_norm_backward (the same kernels), for queueing them on
// different streams: dx (what the rest of the backward waits for; with residual, residual + it, as
// ops::cpu::layer_norm_backward_dx), and dgamma and dbeta.
void layer_norm_backward_dx(int64_t rows, int64_t dim, const float* x, const float* gamma, const float* mean,
                            const float* rstd, const float* dout, const float* dout2, float* dx, cudaStream_t stream,
                            const float* residual = nullptr);
void layer_norm_backward_params(int64_t rows, int64_t dim, const float* x, const float* mean, const float* rstd,
                                const float* dout, const float* dout2, float* dgamma, float* dbeta, float* workspace,
                                cudaStream_t stream);
int64_t layer_norm_backward_workspace(int64_t rows, int64_t dim);

}  // namespace fp8kit::cuda
