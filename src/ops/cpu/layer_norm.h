// LayerNorm's CPU core on float32 arrays: the exact reference of ops/layer_norm.h's Tensor op.
// Threaded over rows; sums in a fixed order (bits independent of threads).
#pragma once

#include <cstdint>

namespace fp8kit::ops::cpu {

// x, out: [rows, dim]; gamma, beta: [dim]; mean, rstd: [rows] saved for the backward.
// bf16_out rounds the output to bf16 (mixed precision: statistics stay float32).
void layer_norm_forward(int64_t rows, int64_t dim, float eps, const float* x, const float* gamma, const float* beta,
                        bool bf16_out, float* out, float* mean, float* rstd);

// The output gradient is dout, or dout + dout2 (float32, added as it is read: the bits of the backward
// of their sum) when dout2 is not null. dx [rows, dim] overwritten.
void layer_norm_backward_dx(int64_t rows, int64_t dim, const float* x, const float* gamma, const float* mean,
                            const float* rstd, const float* dout, const float* dout2, float* dx);
// dgamma, dbeta [dim] overwritten: per column, pieces of 256 rows summed row by row (dgamma as
// fma(dout, xhat, sum)), then the pieces in order: cuda::layer_norm_backward_params's bits.
void layer_norm_backward_params(int64_t rows, int64_t dim, const float* x, const float* mean, const float* rstd,
                                const float* dout, const float* dout2, float* dgamma, float* dbeta);

}  // namespace fp8kit::ops::cpu
