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
