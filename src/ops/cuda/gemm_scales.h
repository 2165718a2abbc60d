// Small kernels around the scaled FP8 GEMMs: scale tensors into the layout cuBLASLt reads, and the
// per-row x per-column scaling of an unscaled product where cuBLASLt has no algorithm for it.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/tensor.h"

namespace fp8kit::cuda {

// out [cols, rows] = in [rows, cols]^T, f32 (1 x 128 group scales, [rows, groups] -> [groups, rows]).
void transpose_scales(const float* in, int64_t rows, int64_t cols, float* out, cudaStream_t stream = nullptr);

// y [m, n] = (a_scale[i] * b_scale[j]) * acc[i, j] (+ bias[j], bf16) (+ y[i, j] when accumulate), in
// fp32, then rounded to y_type (F32 or Bf16). Null scales (both): y = acc (+ bias) (+ y).
void scale_outer(const float* acc, int64_t m, int64_t n, const float* a_scale, const float* b_scale,
                 const uint16_t* bias, bool accumulate, void* y, DType y_type, cudaStream_t stream = nullptr);

// acc [m, n] += partial[i, j] * (a_scale[i] * b_scale[(j / b_rows) * b_stride]), fp32: one 128-wide
// slice of k of a block-scaled product (a_scale: the slice's [m] scales; b_scale: its first one).
void add_scaled_slice(const float* partial, int64_t m, int64_t n, const float* a_scale, const float* b_scale,
                      int64_t b_rows, int64_t b_stride, float* acc, cudaStream_t stream = nullptr);

// out [count] = *scale: a per-tensor scale as the per-row vector cuBLASLt's OuterVec mode reads
// (per tensor x per row products).
void broadcast_scale(const float* scale, int64_t count, float* out, cudaStream_t stream = nullptr);

}  // namespace fp8kit::cuda
