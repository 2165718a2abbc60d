// Element-wise conversions on the GPU, bit-identical to numerics/convert.h: FP8 dequantization,
// float32 <-> bf16, and the bf16 GEMM operands of a matrix (its bf16 copy and transposed copy in one
// pass, as quantize_fp8 does for FP8). All pointers are device pointers; work is queued on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "numerics/format.h"
#include "ops/cuda/linear_epilogue.h"

namespace fp8kit::cuda {

// out[i] = float(q[i]) * (*scale_inv). NaN codes give NaN (GPU NaNs carry no payload or sign).
void dequantize_fp8(const uint8_t* q, int64_t count, Fp8Format format, const float* scale_inv, float* out,
                    cudaStream_t stream = nullptr);
// Round to nearest even; NaN stays a quiet NaN with its sign.
void float_to_bf16(const float* x, int64_t count, uint16_t* out, cudaStream_t stream = nullptr);
void bf16_to_float(const uint16_t* x, int64_t count, float* out, cudaStream_t stream = nullptr);

// One matrix of float_to_bf16_transposed: x [rows, cols] row-major -> out [rows, cols] and out_t
// [cols, rows] (x transposed), bf16 (float_to_bf16's rounding); either output may be null. With
// epilogue.bias set, x is first replaced by epilogue's act(x + bias) (written to epilogue.y when set,
// x + bias to epilogue.pre when set), with epilogue.up by SwiGLU's silu(x) up, and the copies are of
// that: the producer's epilogue fused into its consumer's cast. With
// an active gradient, x is a Linear's output gradient and the copies are of gradient(x) (the
// backward of its epilogue). Not both. x_bf16 instead of x: the matrix is bf16 already (cuDNN's
// attention output or gradients), its copies exact; no epilogue or gradient then, and a bias sum only
// where the wide tile takes it (tile_sums, rows and columns multiples of 4: the caller converts
// otherwise).
struct Bf16Cast {
  const float* x = nullptr;
  int64_t rows = 0, cols = 0;
  uint16_t* out = nullptr;
  uint16_t* out_t = nullptr;
  LinearEpilogue epilogue{};
  EpilogueGradient gradient{};
  // With the gradient: its Linear's bias gradient, summed in this pass where the cast's tile can
  // (BiasSum).
  BiasSum bias_sum{};
  const uint16_t* x_bf16 = nullptr;
};

// Queues the casts of `casts` (any shapes) as one launch per 16 matrices.
void float_to_bf16_transposed(std::span<const Bf16Cast> casts, cudaStream_t stream = nullptr);

}  // namespace fp8kit::cuda
