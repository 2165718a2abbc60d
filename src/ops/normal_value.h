// fill_normal's generator (ops/init.h), one text for the CPU and the GPU: element i of a seed's
// stream is a normal(0, 1) value from a 64-bit hash of (seed, i) (two uniforms, Box-Muller), computed
// with + - * / and sqrt only, each rounded as IEEE float32 on both devices (no contraction: the host's
// operations are functions of their own, the device spells each one), so both give the same bits.
#pragma once

#include "base/host_device.h"

#include <cstdint>

#if !defined(__CUDA_ARCH__)
#include <bit>
#include <cmath>
#endif

namespace fp8kit::ops::normal {

#if defined(__CUDA_ARCH__)
__device__ __forceinline__ float add(float a, float b) { return __fadd_rn(a, b); }
__device__ __forceinline__ float sub(float a, float b) { return __fsub_rn(a, b); }
__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }
__device__ __forceinline__ float div(float a, float b) { return __fdiv_rn(a, b); }
__device__ __forceinline__ float sqrt(float a) { return __fsqrt_rn(a); }
__device__ __forceinline__ float from_bits(uint32_t b) { return __uint_as_float(b); }
__device__ __forceinline__ int leading_zeros(uint32_t v) { return __clz(v); }
#else
// Out of line (ops/init.cpp, built with -ffp-contract=off), so that no caller's compiler fuses one's
// product into another's sum.
float add(float a, float b);
float sub(float a, float b);
float mul(float a, float b);
float div(float a, float b);
float sqrt(float a);
inline float from_bits(uint32_t b) { return std::bit_cast<float>(b); }
inline int leading_zeros(uint32_t v) { return std::countl_zero(v); }
#endif

// splitmix64's finalizer: a bijection of 64-bit words that mixes every input bit into every output bit.
FP8KIT_HOST_DEVICE inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// ln(m 2^-24) for an integer m in [1, 2^24]: m = 2^e f with f in [sqrt(1/2), sqrt(2)), then
// ln f = 2 atanh(s), s = (f - 1) / (f + 1) (|s| < 0.172), as its series to s^11 (~1e-9 relative).
FP8KIT_HOST_DEVICE inline float log_of_fraction(uint32_t m) {
  int e = 31 - leading_zeros(m);
  float f = mul(static_cast<float>(m), from_bits(static_cast<uint32_t>(127 - e) << 23));  // exact
  if (f > 1.41421356f) f = mul(f, 0.5f), e += 1;
  const float s = div(sub(f, 1.0f), add(f, 1.0f)), z = mul(s, s);
  float series = add(1.0f / 9.0f, mul(z, 1.0f / 11.0f));
  series = add(1.0f / 7.0f, mul(z, series));
  series = add(1.0f / 5.0f, mul(z, series));
  series = add(1.0f / 3.0f, mul(z, series));
  series = add(1.0f, mul(z, series));
  return add(mul(static_cast<float>(e - 24), 0.693147181f), mul(mul(2.0f, s), series));
}

// cos(2 pi k 2^-24) for k in [0, 2^24): the quadrant from k's top two bits (exact), then the Taylor
// series of cos or sin on [0, pi/2) (to x^12 and x^13: ~1e-8).
FP8KIT_HOST_DEVICE inline float cos_of_turn(uint32_t k) {
  const uint32_t quadrant = k >> 22;
  const float f = mul(static_cast<float>(k & 0x3FFFFFu), from_bits(static_cast<uint32_t>(127 - 22) << 23));  // exact
  const float x = mul(f, 1.57079633f);
  const float z = mul(x, x);
  float c = add(-1.0f / 3628800.0f, mul(z, 1.0f / 479001600.0f));
  c = add(1.0f / 40320.0f, mul(z, c));
  c = add(-1.0f / 720.0f, mul(z, c));
  c = add(1.0f / 24.0f, mul(z, c));
  c = add(-0.5f, mul(z, c));
  c = add(1.0f, mul(z, c));
  float s = add(-1.0f / 39916800.0f, mul(z, 1.0f / 6227020800.0f));
  s = add(1.0f / 362880.0f, mul(z, s));
  s = add(-1.0f / 5040.0f, mul(z, s));
  s = add(1.0f / 120.0f, mul(z, s));
  s = add(-1.0f / 6.0f, mul(z, s));
  s = mul(x, add(1.0f, mul(z, s)));
  return quadrant == 0 ? c : quadrant == 1 ? -s : quadrant == 2 ? -c : s;
}

// Element i of the normal(0, 1) stream of `seed`.
FP8KIT_HOST_DEVICE inline float value(uint64_t seed, uint64_t i) {
  const uint64_t h = mix64(mix64(seed) ^ (i * 0x9E3779B97F4A7C15ull));
  const uint32_t m = static_cast<uint32_t>(h >> 40) + 1;  // u1 = m 2^-24 in (0, 1]
  const uint32_t k = static_cast<uint32_t>(h & 0xFFFFFFu);  // u2 = k 2^-24 in [0, 1)
  const float r = sqrt(mul(-2.0f, log_of_fraction(m)));
  return mul(r, cos_of_turn(k));
}

}  // namespace fp8kit::ops::normal
