// AVX-512 conversion kernels: the AVX2 algorithm (convert_avx2.cpp) on 16 lanes with mask registers.
#include "numerics/cast.h"
#include "numerics/convert_kernels.h"

#include <immintrin.h>

#include <algorithm>
#include <bit>
#include <cmath>

// Every function below is compiled for AVX-512F (called only where the CPU has it). clang ignores
// `#pragma GCC target`, so it gets its own form.
#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx512f"))), apply_to = function)
#else
#pragma GCC target("avx512f")
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*() and trip these warnings spuriously.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace fp8kit::detail {
namespace {

inline __m512i splat(uint32_t v) { return _mm512_set1_epi32(static_cast<int>(v)); }

// 16 floats (already scaled) -> 16 FP8 codes; saturating.
template <Fp8Format F>
inline __m128i encode16(__m512 y) {
  constexpr FormatInfo fi = info(F);
  constexpr int m = fi.mantissa_bits;
  constexpr int shift = 23 - m;
  constexpr uint32_t rebias = static_cast<uint32_t>(127 - fi.bias) << m;
  const float magic = std::ldexp(1.0f, 24 - fi.bias - m);  // ulp(magic) = FP8's subnormal step
  const __m512i bits = _mm512_castps_si512(y);
  const __m512i sign = _mm512_srli_epi32(_mm512_and_si512(bits, splat(0x80000000u)), 24);
  const __mmask16 is_nan = _mm512_cmp_ps_mask(y, y, _CMP_UNORD_Q);
  const __m512 a = _mm512_min_ps(_mm512_abs_ps(y), _mm512_set1_ps(fi.max_finite));
  const __m512i ai = _mm512_castps_si512(a);
  const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(ai, shift), splat(1));
  const __m512i rounded = _mm512_srli_epi32(_mm512_add_epi32(ai, _mm512_add_epi32(splat((1u << (shift - 1)) - 1u), lsb)), shift);
  const __m512i normal = _mm512_sub_epi32(rounded, splat(rebias));
  const __m512 shifted = _mm512_add_ps(a, _mm512_set1_ps(magic));
  const __m512i subnormal = _mm512_sub_epi32(_mm512_castps_si512(shifted), splat(std::bit_cast<uint32_t>(magic)));
  const __mmask16 is_subnormal = _mm512_cmp_ps_mask(a, _mm512_set1_ps(fi.min_normal), _CMP_LT_OQ);
  __m512i code = _mm512_mask_blend_epi32(is_subnormal, normal, subnormal);
  code = _mm512_mask_blend_epi32(is_nan, code, splat(fi.nan_code));
  return _mm512_cvtepi32_epi8(_mm512_or_si512(code, sign));
}

// max_ps returns its second operand when the first is NaN: NaN never enters the accumulator.
inline __m512 max_abs(__m512 acc, __m512 x) { return _mm512_max_ps(_mm512_abs_ps(x), acc); }

inline __m512 load_bf16(const uint16_t* x) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

inline void store16(uint8_t* out, __m128i codes) { _mm_storeu_si128(reinterpret_cast<__m128i*>(out), codes); }

template <Fp8Format F, ScaleOp Op>
float quantize_f32_as(const float* x, size_t n, float scale, uint8_t* out) {
  const __m512 s = _mm512_set1_ps(scale);
  __m512 acc = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = _mm512_loadu_ps(x + i);
    acc = max_abs(acc, v);
    store16(out + i, encode16<F>(Op == ScaleOp::Multiply ? _mm512_mul_ps(v, s) : _mm512_div_ps(v, s)));
  }
  const float tail = quantize_tail_f32(x + i, n - i, scale, Op, F, out + i);
  return std::max(_mm512_reduce_max_ps(acc), tail);
}

template <Fp8Format F>
float quantize_bf16_as(const uint16_t* x, size_t n, float scale, uint8_t* out) {
  const __m512 s = _mm512_set1_ps(scale);
  __m512 acc = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 v = load_bf16(x + i);
    acc = max_abs(acc, v);
    store16(out + i, encode16<F>(_mm512_mul_ps(v, s)));
  }
  const float tail = quantize_tail_bf16(x + i, n - i, scale, F, out + i);
  return std::max(_mm512_reduce_max_ps(acc), tail);
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
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    acc0 = max_abs(acc0, _mm512_loadu_ps(x + i));
    acc1 = max_abs(acc1, _mm512_loadu_ps(x + i + 16));
  }
  return std::max(_mm512_reduce_max_ps(_mm512_max_ps(acc0, acc1)), amax_tail(x + i, n - i));
}

}  // namespace

const ConvertKernels kAvx512Kernels{quantize_f32, quantize_bf16, amax};

}  // namespace fp8kit::detail

#ifdef __clang__
#pragma clang attribute pop
#endif
