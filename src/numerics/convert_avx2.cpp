// AVX2 conversion kernels, bit-identical to cast.h: the normal range is rounded on the float's bits
// (ties to even), the subnormal range by adding a constant whose ulp is FP8's subnormal step.
#include "numerics/cast.h"
#include "numerics/convert_kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>

// Every function below is compiled for AVX2 + FMA (called only where the CPU has it). clang ignores
// `#pragma GCC target`, so it gets its own form.
#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC target("avx2,fma")
#endif

namespace fp8kit::detail {
namespace {

inline __m256i splat(uint32_t v) { return _mm256_set1_epi32(static_cast<int>(v)); }
inline __m256 abs8(__m256 x) { return _mm256_castsi256_ps(_mm256_and_si256(_mm256_castps_si256(x), splat(0x7FFFFFFFu))); }

// 8 floats (already scaled) -> 8 FP8 codes, one per 32-bit lane; saturating.
template <Fp8Format F>
inline __m256i encode8(__m256 y) {
  constexpr FormatInfo fi = info(F);
  constexpr int m = fi.mantissa_bits;
  constexpr int shift = 23 - m;
  constexpr uint32_t rebias = static_cast<uint32_t>(127 - fi.bias) << m;
  // a + kMagic rounds a (< min normal) to a multiple of the subnormal step: ulp(kMagic) = 2^(1-bias-m).
  const float magic = std::ldexp(1.0f, 24 - fi.bias - m);
  const __m256i bits = _mm256_castps_si256(y);
  const __m256i sign = _mm256_srli_epi32(_mm256_and_si256(bits, splat(0x80000000u)), 24);
  const __m256 is_nan = _mm256_cmp_ps(y, y, _CMP_UNORD_Q);
  const __m256 a = _mm256_min_ps(abs8(y), _mm256_set1_ps(fi.max_finite));  // saturate (NaN replaced below)
  const __m256i ai = _mm256_castps_si256(a);
  const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(ai, shift), splat(1));
  const __m256i rounded = _mm256_srli_epi32(_mm256_add_epi32(ai, _mm256_add_epi32(splat((1u << (shift - 1)) - 1u), lsb)), shift);
  const __m256i normal = _mm256_sub_epi32(rounded, splat(rebias));
  const __m256 shifted = _mm256_add_ps(a, _mm256_set1_ps(magic));
  const __m256i subnormal = _mm256_sub_epi32(_mm256_castps_si256(shifted), splat(std::bit_cast<uint32_t>(magic)));
  const __m256 is_subnormal = _mm256_cmp_ps(a, _mm256_set1_ps(fi.min_normal), _CMP_LT_OQ);
  __m256 code = _mm256_blendv_ps(_mm256_castsi256_ps(normal), _mm256_castsi256_ps(subnormal), is_subnormal);
  code = _mm256_blendv_ps(code, _mm256_castsi256_ps(splat(fi.nan_code)), is_nan);
  return _mm256_or_si256(_mm256_castps_si256(code), sign);
}

// Four vectors of 8 codes (0..255 per lane) -> 32 bytes in order.
inline void store32(uint8_t* out, __m256i c0, __m256i c1, __m256i c2, __m256i c3) {
  const __m256i packed = _mm256_packus_epi16(_mm256_packus_epi32(c0, c1), _mm256_packus_epi32(c2, c3));
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_permutevar8x32_epi32(packed, order));
}

// max_ps returns its second operand when the first is NaN: NaN never enters the accumulator.
inline __m256 max_abs(__m256 acc, __m256 x) { return _mm256_max_ps(abs8(x), acc); }

inline float reduce_max(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

inline __m256 load_bf16(const uint16_t* x) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

template <Fp8Format F, ScaleOp Op>
float quantize_f32_as(const float* x, size_t n, float scale, uint8_t* out) {
  const __m256 s = _mm256_set1_ps(scale);
  auto scaled = [&](__m256 v) { return Op == ScaleOp::Multiply ? _mm256_mul_ps(v, s) : _mm256_div_ps(v, s); };
  __m256 acc = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i c[4];
    for (int k = 0; k < 4; ++k) {
      const __m256 v = _mm256_loadu_ps(x + i + 8 * k);
      acc = max_abs(acc, v);
      c[k] = encode8<F>(scaled(v));
    }
    store32(out + i, c[0], c[1], c[2], c[3]);
  }
  const float tail = quantize_tail_f32(x + i, n - i, scale, Op, F, out + i);
  return std::max(reduce_max(acc), tail);
}

template <Fp8Format F>
float quantize_bf16_as(const uint16_t* x, size_t n, float scale, uint8_t* out) {
  const __m256 s = _mm256_set1_ps(scale);
  __m256 acc = _mm256_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m256i c[4];
    for (int k = 0; k < 4; ++k) {
      const __m256 v = load_bf16(x + i + 8 * k);
      acc = max_abs(acc, v);
      c[k] = encode8<F>(_mm256_mul_ps(v, s));
    }
    store32(out + i, c[0], c[1], c[2], c[3]);
  }
  const float tail = quantize_tail_bf16(x + i, n - i, scale, F, out + i);
  return std::max(reduce_max(acc), tail);
}

float quantize_f32(const float* x, size_t n, float scale, ScaleOp op, Fp8Format format, uint8_t* out) {
  if (format == Fp8Format::E4M3) {
    return op == ScaleOp::Multiply ? quantize_f32_as<Fp8Format::E4M3, ScaleOp::Multiply>(x, n, scale, out)
                                   : quantize_f32_as<Fp8Format::E4M3, ScaleOp::Divide>(x, n, scale, out);
  }
  return op == ScaleOp::Multiply ? quantize_f32_as<Fp8Format::E5M2, ScaleOp::Multiply>(x, n, scale, out)
                                 : quantize_f32_as<Fp8Format::E5M2, ScaleOp::Divide>(x, n, scale, out);
}

float quantize_bf16(const uint16_t* x, size_t n, float scale, Fp8Format format, uint8_t* out) {
  return format == Fp8Format::E4M3 ? quantize_bf16_as<Fp8Format::E4M3>(x, n, scale, out)
                                   : quantize_bf16_as<Fp8Format::E5M2>(x, n, scale, out);
}

float amax(const float* x, size_t n) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    for (int k = 0; k < 4; ++k) acc[k] = max_abs(acc[k], _mm256_loadu_ps(x + i + 8 * k));
  }
  const __m256 all = _mm256_max_ps(_mm256_max_ps(acc[0], acc[1]), _mm256_max_ps(acc[2], acc[3]));
  return std::max(reduce_max(all), amax_tail(x + i, n - i));
}

}  // namespace

const ConvertKernels kAvx2Kernels{quantize_f32, quantize_bf16, amax};

}  // namespace fp8kit::detail

#ifdef __clang__
#pragma clang attribute pop
#endif
