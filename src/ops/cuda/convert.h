// Element-wise conversions on the GPU, bit-identical to numerics/convert.h: FP8 dequantization and
// float32 <-> bf16. All pointers are device pointers; `count` elements; work is queued on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "numerics/format.h"

namespace fp8kit::cuda {

// out[i] = float(q[i]) * (*scale_inv). NaN codes give NaN (GPU NaNs carry no payload or sign).
void dequantize_fp8(const uint8_t* q, int64_t count, Fp8Format format, const float* scale_inv, float* out,
                    cudaStream_t stream = nullptr);
// Round to nearest even; NaN stays a quiet NaN with its sign.
void float_to_bf16(const float* x, int64_t count, uint16_t* out, cudaStream_t stream = nullptr);
void bf16_to_float(const uint16_t* x, int64_t count, float* out, cudaStream_t stream = nullptr);

}  // namespace fp8kit::cuda
