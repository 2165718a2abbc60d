// The portable conversion kernels: the scalar casts of cast.h in a loop. They are the reference the
// SIMD paths must match bit for bit, and the tail loop of every path.
#include "numerics/cast.h"
#include "numerics/convert_kernels.h"

#include <cmath>

namespace fp8kit::detail {
namespace {

// NaN compares false, so it never raises the running max; inf does.
inline float max_abs(float acc, float x) {
  const float a = std::fabs(x);
  return a > acc ? a : acc;
}

template <Fp8Format F>
float quantize_f32_as(const float* x, size_t n, float scale, ScaleOp op, uint8_t* out) {
  float acc = 0.0f;
  if (op == ScaleOp::Multiply) {
    for (size_t i = 0; i < n; ++i) {
      acc = max_abs(acc, x[i]);
      out[i] = encode_fp8<F>(x[i] * scale, Overflow::Saturate);
    }
  } else {
    for (size_t i = 0; i < n; ++i) {
      acc = max_abs(acc, x[i]);
      out[i] = encode_fp8<F>(x[i] / scale, Overflow::Saturate);
    }
  }
  return acc;
}

template <Fp8Format F>
float quantize_bf16_as(const uint16_t* x, size_t n, float scale, uint8_t* out) {
  float acc = 0.0f;
  for (size_t i = 0; i < n; ++i) {
    const float v = bf16_to_float(x[i]);
    acc = max_abs(acc, v);
    out[i] = encode_fp8<F>(v * scale, Overflow::Saturate);
  }
  return acc;
}

}  // namespace

float quantize_tail_f32(const float* x, size_t n, float scale, ScaleOp op, Fp8Format format, uint8_t* out) {
  return format == Fp8Format::E4M3 ? quantize_f32_as<Fp8Format::E4M3>(x, n, scale, op, out)
                                   : quantize_f32_as<Fp8Format::E5M2>(x, n, scale, op, out);
}

float quantize_tail_bf16(const uint16_t* x, size_t n, float scale, Fp8Format format, uint8_t* out) {
  return format == Fp8Format::E4M3 ? quantize_bf16_as<Fp8Format::E4M3>(x, n, scale, out)
                                   : quantize_bf16_as<Fp8Format::E5M2>(x, n, scale, out);
}

float amax_tail(const float* x, size_t n) {
  float acc = 0.0f;
  for (size_t i = 0; i < n; ++i) acc = max_abs(acc, x[i]);
  return acc;
}

const ConvertKernels kPortableKernels{quantize_tail_f32, quantize_tail_bf16, amax_tail};

}  // namespace fp8kit::detail
