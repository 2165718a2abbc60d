// RMSNorm's CPU core on float32 arrays: the exact reference of ops/rms_norm.h's Tensor op.
// Threaded over rows; sums in a fixed order (bits independent of threads).
#pragma once

#include "ops/piece_order.h"

#include <cstdint>

namespace fp8kit::ops::cpu {

// The order of dweight's sum over rows, on both devices.
inline constexpr PieceOrder kRmsNormWeightOrder{256};

// x, out: [rows, dim]; weight: [dim]; rstd: [rows] saved for the backward. out = (x rstd) weight,
// rstd = 1 / sqrt(sum(x^2) / dim + eps) with the squares added in column order.
void rms_norm_forward(int64_t rows, int64_t dim, float eps, const float* x, const float* weight, bool bf16_out,
                      float* out, float* rstd);

// 1 / sqrt(sum(x^2) / dim + eps) of one row, the squares added in column order: rms_norm_forward's rstd.
float rms_rstd(const float* x, int64_t dim, float eps);

// Inference's residual step on bf16 rows: with delta, residual = bf16(residual + delta) (float32 sum)
// in place; then out = bf16((residual rstd) weight) with rms_norm_forward's rstd and products (the same
// bits as it gives for f32 inputs holding these values). delta may be null; out [rows, dim] bf16.
void add_rms_norm(int64_t rows, int64_t dim, float eps, uint16_t* residual, const uint16_t* delta,
                  const float* weight, uint16_t* out);

// dx [rows, dim] = rstd (dout weight - x rstd^2 mean(dout weight x)) overwritten.
void rms_norm_backward_dx(int64_t rows, int64_t dim, const float* x, const float* weight, const float* rstd,
                          const float* dout, float* dx);
// dweight [dim] overwritten: per column, kRmsNormWeightOrder's pieces of rows, each summed row by row
// as fma(dout, x rstd, sum), then the pieces in order: cuda::rms_norm_backward's bits.
void rms_norm_backward_weight(int64_t rows, int64_t dim, const float* x, const float* rstd, const float* dout,
                              float* dweight);

}  // namespace fp8kit::ops::cpu
