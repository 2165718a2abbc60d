// Internal to convert.cpp: the single-threaded kernels of one SIMD path (portable, AVX2, AVX-512).
// Each path lives in its own convert_<path>.cpp, compiled for its instruction set with target
// attributes so one binary carries all of them and convert.cpp picks at run time.
#pragma once

#include "numerics/format.h"

#include <cstddef>
#include <cstdint>

namespace fp8kit::detail {

// How the scale is applied before the cast: TE multiplies by `scale`, Keras divides by its multiplier.
enum class ScaleOp : uint8_t { Multiply, Divide };

struct ConvertKernels {
  // out[i] = fp8 code of x[i] (*|/) scale, saturating; returns max |x[i]| over non-NaN x.
  float (*quantize_f32)(const float* x, size_t n, float scale, ScaleOp op, Fp8Format format, uint8_t* out);
  float (*quantize_bf16)(const uint16_t* x, size_t n, float scale, Fp8Format format, uint8_t* out);
  float (*amax)(const float* x, size_t n);
};

extern const ConvertKernels kPortableKernels;
extern const ConvertKernels kAvx2Kernels;    // call only when the CPU has avx2 and fma
extern const ConvertKernels kAvx512Kernels;  // call only when the CPU has avx512f

// The scalar reference step shared by every path's tail loop.
float quantize_tail_f32(const float* x, size_t n, float scale, ScaleOp op, Fp8Format format, uint8_t* out);
float quantize_tail_bf16(const uint16_t* x, size_t n, float scale, Fp8Format format, uint8_t* out);
float amax_tail(const float* x, size_t n);

}  // namespace fp8kit::detail
