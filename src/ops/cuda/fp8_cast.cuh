// Device-side scalar casts, bit-identical to numerics/cast.h (the CPU reference): float32 -> FP8
// (round to nearest even, saturating, NaN -> S.nan_code with the input's sign), FP8 -> float32,
// float32 <-> bf16. Included by the .cu kernels only.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "numerics/format.h"

namespace fp8kit::cuda {

// Two floats -> two FP8 codes (low byte = x0). The hardware cvt (round to nearest even, .satfinite:
// +-inf and out-of-range finite values clamp to +-max) matches encode_fp8<F>(x, Saturate) except for
// NaN, which it turns into a canonical unsigned NaN; the CPU keeps the sign and uses 0x7F (E4M3) /
// 0x7E (E5M2). The NaN test uses the unscaled input: the GPU multiply would drop a NaN's sign.
template <Fp8Format F>
__device__ __forceinline__ uint32_t encode_fp8x2(float scaled0, float scaled1, uint32_t bits0, uint32_t bits1) {
  constexpr __nv_fp8_interpretation_t kind = F == Fp8Format::E4M3 ? __NV_E4M3 : __NV_E5M2;
  constexpr uint32_t nan_code = F == Fp8Format::E4M3 ? 0x7Fu : 0x7Eu;
  uint32_t codes = __nv_cvt_float2_to_fp8x2(make_float2(scaled0, scaled1), __NV_SATFINITE, kind);
  if ((bits0 & 0x7FFFFFFFu) > 0x7F800000u) codes = (codes & 0xFF00u) | ((bits0 >> 24) & 0x80u) | nan_code;
  if ((bits1 & 0x7FFFFFFFu) > 0x7F800000u) codes = (codes & 0x00FFu) | ((((bits1 >> 24) & 0x80u) | nan_code) << 8);
  return codes;
}

// Four values of a row -> four FP8 codes (byte i = column i), as numerics' quantize_fp8 (multiply)
// or quantize_fp8_divide (Divide) casts them.
template <Fp8Format F, bool Divide>
__device__ __forceinline__ uint32_t encode_row(const float v[4], float scale) {
  constexpr float max = F == Fp8Format::E4M3 ? 448.0f : 57344.0f;
  float y[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float scaled = Divide ? __fdiv_rn(v[i], scale) : __fmul_rn(v[i], scale);
    y[i] = fminf(fmaxf(scaled, -max), max);  // saturate (+-inf too) whatever the cvt does with them
  }
  const uint32_t lo = encode_fp8x2<F>(y[0], y[1], __float_as_uint(v[0]), __float_as_uint(v[1]));
  const uint32_t hi = encode_fp8x2<F>(y[2], y[3], __float_as_uint(v[2]), __float_as_uint(v[3]));
  return lo | (hi << 16);
}

// A 4 x 4 byte matrix transposed: rows[r] holds row r (byte i = column i); columns[i] gets column i
// (byte r = row r).
__device__ __forceinline__ void transpose_4x4(const uint32_t rows[4], uint32_t columns[4]) {
  const uint32_t a = __byte_perm(rows[0], rows[1], 0x5140), b = __byte_perm(rows[2], rows[3], 0x5140);
  const uint32_t c = __byte_perm(rows[0], rows[1], 0x7362), d = __byte_perm(rows[2], rows[3], 0x7362);
  columns[0] = __byte_perm(a, b, 0x5410);
  columns[1] = __byte_perm(a, b, 0x7632);
  columns[2] = __byte_perm(c, d, 0x5410);
  columns[3] = __byte_perm(c, d, 0x7632);
}

// FP8 code -> float32, exact (every FP8 value is a half; NaN stays NaN, E5M2 inf stays inf).
template <Fp8Format F>
__device__ __forceinline__ float decode_fp8(uint8_t code) {
  constexpr __nv_fp8_interpretation_t kind = F == Fp8Format::E4M3 ? __NV_E4M3 : __NV_E5M2;
  return __half2float(__half(__nv_cvt_fp8_to_halfraw(code, kind)));
}

// float32 -> bf16 bits, round to nearest even; NaN stays a quiet NaN with its sign (as cast.h).
__device__ __forceinline__ uint16_t float_to_bf16(float x) {
  const uint32_t bits = __float_as_uint(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  return static_cast<uint16_t>((bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16);
}
__device__ __forceinline__ float bf16_to_float(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }

// |x| as ordered bits for the amax reduction: NaN gives 0 (ignored), inf counts.
__device__ __forceinline__ uint32_t amax_bits(uint32_t bits) {
  const uint32_t abs = bits & 0x7FFFFFFFu;
  return abs > 0x7F800000u ? 0u : abs;
}

}  // namespace fp8kit::cuda
