// Scalar casts between float32, bf16 and FP8: round-to-nearest-even, exact to the OCP formats.
// Inline because they sit in every hot loop; bulk (vectorised, threaded) forms are in convert.h.
#pragma once

#include "numerics/format.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>

namespace fp8kit {

// float32 -> FP8 code. NaN gives the format's NaN (sign kept); see Overflow for the rest.
template <Fp8Format F>
inline uint8_t encode_fp8(float x, Overflow overflow = Overflow::Saturate) {
  constexpr FormatInfo fi = info(F);
  constexpr int m = fi.mantissa_bits;
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint8_t sign = static_cast<uint8_t>((bits >> 24) & 0x80);
  const uint32_t abs = bits & 0x7FFFFFFFu;
  if (abs > 0x7F800000u) return sign | fi.nan_code;
  uint32_t code;
  if (abs < (static_cast<uint32_t>(127 + 1 - fi.bias) << 23)) {
    // Below FP8's smallest normal: count subnormal steps. Scaling by a power of two is exact and
    // nearbyint rounds half to even; a result of 2^m is the smallest normal, which is code 2^m too.
    const float steps = std::bit_cast<float>(abs) * std::ldexp(1.0f, fi.bias - 1 + m);
    code = static_cast<uint32_t>(std::nearbyint(steps));
  } else if (abs >= 0x7F800000u) {
    code = 0xFFu;  // infinity: handled as overflow below
  } else {
    // Round the 23-bit mantissa to m bits (ties to even); a carry moves into the exponent.
    constexpr int shift = 23 - m;
    const uint32_t lsb = (abs >> shift) & 1u;
    const uint32_t rounded = (abs + ((1u << (shift - 1)) - 1u) + lsb) >> shift;
    const uint32_t rebias = static_cast<uint32_t>(127 - fi.bias) << m;
    code = rounded - rebias;
    if (rounded >= (0xFFu << m)) code = 0xFFu;  // beyond float range after rounding: overflow
  }
  if (code > fi.max_code) {
    if (overflow == Overflow::Saturate) return sign | fi.max_code;
    return sign | (fi.has_infinity ? uint8_t{0x7C} : fi.nan_code);
  }
  return sign | static_cast<uint8_t>(code);
}

inline uint8_t encode_fp8(float x, Fp8Format format, Overflow overflow = Overflow::Saturate) {
  return format == Fp8Format::E4M3 ? encode_fp8<Fp8Format::E4M3>(x, overflow)
                                   : encode_fp8<Fp8Format::E5M2>(x, overflow);
}

// FP8 code -> float32 (exact). E4M3 has no infinity; S.1111.111 is NaN. E5M2 S.11111.00 is inf.
template <Fp8Format F>
constexpr float decode_fp8(uint8_t code) {
  constexpr FormatInfo fi = info(F);
  constexpr int m = fi.mantissa_bits;
  const bool negative = code & 0x80;
  const int exponent = (code & 0x7F) >> m;
  const int mantissa = code & ((1 << m) - 1);
  constexpr int max_exponent = (1 << fi.exponent_bits) - 1;
  float magnitude;
  if constexpr (F == Fp8Format::E4M3) {
    if (exponent == max_exponent && mantissa == (1 << m) - 1) return std::numeric_limits<float>::quiet_NaN();
  } else {
    if (exponent == max_exponent) {
      if (mantissa != 0) return std::numeric_limits<float>::quiet_NaN();
      return negative ? -std::numeric_limits<float>::infinity() : std::numeric_limits<float>::infinity();
    }
  }
  if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), 1 - fi.bias - m);
  } else {
    magnitude = std::ldexp(static_cast<float>((1 << m) + mantissa), exponent - fi.bias - m);
  }
  return negative ? -magnitude : magnitude;
}

inline float decode_fp8(uint8_t code, Fp8Format format) {
  return format == Fp8Format::E4M3 ? decode_fp8<Fp8Format::E4M3>(code) : decode_fp8<Fp8Format::E5M2>(code);
}

// bf16 is stored as its 16 bits. float32 -> bf16 rounds to nearest even; NaN stays (quiet) NaN.
inline uint16_t float_to_bf16(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  const uint32_t rounding = 0x7FFFu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding) >> 16);
}
inline float bf16_to_float(uint16_t h) { return std::bit_cast<float>(static_cast<uint32_t>(h) << 16); }
// Rounds a float32 to the nearest bf16 value, kept in float32 (what mixed-bf16 matmuls see).
inline float round_bf16(float x) { return bf16_to_float(float_to_bf16(x)); }

// bf16 -> FP8 is exact as bf16 -> float32 -> FP8 (every bf16 is a float32).
inline uint8_t encode_fp8_from_bf16(uint16_t h, Fp8Format format, Overflow overflow = Overflow::Saturate) {
  return encode_fp8(bf16_to_float(h), format, overflow);
}

}  // namespace fp8kit
