// LayerNorm over the last axis in float32 (Keras: population variance, out = x inv + (beta - mean inv)
// with inv = gamma / sqrt(var + eps)), and its gradient.
#pragma once

#include <cstdint>

namespace fp8kit::ops {

// x, out: [rows, dim]; gamma, beta: [dim]; mean, rstd: [rows] saved for the backward.
// bf16_out rounds the output to bf16 (mixed precision: statistics stay float32).
void layer_norm_forward(int64_t rows, int64_t dim, float eps, const float* x, const float* gamma, const float* beta,
                        bool bf16_out, float* out, float* mean, float* rstd);

// dx [rows, dim] and dgamma, dbeta [dim] overwritten.
void layer_norm_backward(int64_t rows, int64_t dim, const float* x, const float* gamma, const float* mean,
                         const float* rstd, const float* dout, float* dx, float* dgamma, float* dbeta);

}  // namespace fp8kit::ops
