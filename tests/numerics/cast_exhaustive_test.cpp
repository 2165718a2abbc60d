// Exhaustive check of the FP8 casts: every one of the 2^32 float32 bit patterns, both formats, both
// overflow policies, against a reference written here from the formats' definition (decoded values,
// nearest value with ties to the even code), plus the bulk (SIMD) path over all patterns, all 256
// decodes, and the spec's boundary cases by name.
// FP8KIT_EXHAUSTIVE_STRIDE=n (default 1) checks every n-th pattern, for slow sanitizer builds only.
#include "numerics/cast.h"
#include "numerics/convert.h"

#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <random>
#include <vector>

namespace fp8kit {
namespace {

// The format from its definition alone: bit widths, bias, and which codes are special.
struct Reference {
  int mantissa_bits, bias;
  uint8_t max_code;     // largest finite positive code
  uint8_t nan_code;     // NaN a cast produces (sign added)
  uint8_t overflow_code;  // non-saturating overflow result: NaN (E4M3) or inf (E5M2)
  // values[c] for c = 0..max_code + 1: positive finite values in code order; the last entry is the
  // value the next code would have with an unbounded exponent (480, 65536), used only for rounding.
  std::vector<double> values;
  // starts[c]: the smallest |x| bit pattern that rounds to magnitude code c (c = max_code + 1: overflow).
  std::vector<uint32_t> starts;
};

double defined_value(int code, int mantissa_bits, int bias) {
  const int exponent = code >> mantissa_bits, mantissa = code & ((1 << mantissa_bits) - 1);
  if (exponent == 0) return std::ldexp(mantissa, 1 - bias - mantissa_bits);
  return std::ldexp((1 << mantissa_bits) + mantissa, exponent - bias - mantissa_bits);
}

Reference make_reference(Fp8Format format) {
  Reference r;
  if (format == Fp8Format::E4M3) {
    r = {3, 7, 0x7E, 0x7F, 0x7F, {}, {}};
  } else {
    r = {2, 15, 0x7B, 0x7E, 0x7C, {}, {}};
  }
  for (int c = 0; c <= r.max_code + 1; ++c) r.values.push_back(defined_value(c, r.mantissa_bits, r.bias));
  r.starts.push_back(0);
  for (int c = 1; c <= r.max_code + 1; ++c) {
    // Halfway between neighbours (exact in float: at most 5 significant bits); the tie goes to the even code.
    const auto midpoint = static_cast<float>((r.values[c - 1] + r.values[c]) / 2);
    const uint32_t bits = std::bit_cast<uint32_t>(midpoint);
    r.starts.push_back(c % 2 == 0 ? bits : bits + 1);
  }
  return r;
}

const Reference& reference(Fp8Format format) {
  static const Reference e4m3 = make_reference(Fp8Format::E4M3), e5m2 = make_reference(Fp8Format::E5M2);
  return format == Fp8Format::E4M3 ? e4m3 : e5m2;
}

// Magnitude code -> final code under the policy (sign added by the caller).
uint8_t finish(const Reference& r, size_t magnitude_code, Overflow overflow) {
  if (magnitude_code <= r.max_code) return static_cast<uint8_t>(magnitude_code);
  return overflow == Overflow::Saturate ? r.max_code : r.overflow_code;
}

// The nearest-value reference, one value at a time: binary search in the sorted decoded values.
uint8_t nearest_reference(float x, Fp8Format format, Overflow overflow) {
  const Reference& r = reference(format);
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  if (std::isnan(x)) return sign | r.nan_code;
  const double a = std::fabs(static_cast<double>(x));
  const auto it = std::lower_bound(r.values.begin(), r.values.end(), a);
  size_t code;
  if (it == r.values.end()) {
    code = r.values.size() - 1;  // beyond the virtual next value: overflow
  } else if (it == r.values.begin() || *it == a) {
    code = static_cast<size_t>(it - r.values.begin());
  } else {
    const size_t hi = static_cast<size_t>(it - r.values.begin()), lo = hi - 1;
    const double dlo = a - r.values[lo], dhi = r.values[hi] - a;
    code = dlo < dhi ? lo : dhi < dlo ? hi : (lo % 2 == 0 ? lo : hi);
  }
  return sign | finish(r, code, overflow);
}

uint32_t stride() {
  const char* s = std::getenv("FP8KIT_EXHAUSTIVE_STRIDE");
  const long v = s ? std::atol(s) : 1;
  return v >= 1 ? static_cast<uint32_t>(v) : 1u;
}

// want[i] = reference magnitude code of |x| bits begin + i * step, for [begin, end): each code's
// interval of bit patterns [starts[c], starts[c + 1]) filled at once; NaN patterns get nan_code.
void reference_codes(const Reference& r, uint32_t begin, uint32_t end, uint32_t step, Overflow overflow,
                     std::vector<uint8_t>& want) {
  want.resize((end - begin + step - 1) / step);
  auto index = [&](uint64_t bits) { return std::min<uint64_t>(want.size(), (bits - begin + step - 1) / step); };
  const uint64_t nan_start = uint64_t{0x7F800001};
  for (size_t c = 0; c < r.starts.size(); ++c) {
    const uint64_t lo = std::max<uint64_t>(r.starts[c], begin);
    const uint64_t hi = std::min<uint64_t>(c + 1 < r.starts.size() ? r.starts[c + 1] : nan_start, end);
    if (lo < hi) std::fill(want.begin() + index(lo), want.begin() + index(hi), finish(r, c, overflow));
  }
  if (end > nan_start) std::fill(want.begin() + index(std::max<uint64_t>(nan_start, begin)), want.end(), r.nan_code);
}

// Calls check(begin, end) over all |x| bit patterns [0, 2^31) in chunks, across threads; returns the
// number of mismatches.
template <typename Check>
uint64_t sweep(Check check) {
  constexpr uint64_t kChunk = uint64_t{1} << 20;
  constexpr int64_t kChunks = int64_t{1} << 11;  // 2^31 / kChunk
  std::atomic<uint64_t> mismatches{0};
#pragma omp parallel for schedule(dynamic, 8)
  for (int64_t chunk = 0; chunk < kChunks; ++chunk) {
    const auto begin = static_cast<uint32_t>(static_cast<uint64_t>(chunk) * kChunk);
    const auto end = static_cast<uint32_t>(static_cast<uint64_t>(begin) + kChunk);
    mismatches += check(begin, end);
  }
  return mismatches.load();
}

// Every float32 bit pattern through encode_fp8, both signs.
template <Fp8Format format, Overflow overflow>
void exhaustive_scalar() {
  const Reference& r = reference(format);
  const uint32_t step = stride();
  const uint64_t bad = sweep([&](uint32_t begin, uint32_t end) {
    thread_local std::vector<uint8_t> want;
    reference_codes(r, begin, end, step, overflow, want);
    uint64_t local = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      const uint32_t a = begin + static_cast<uint32_t>(i) * step;
      for (uint32_t sign : {0u, 0x80000000u}) {
        const uint8_t got = encode_fp8<format>(std::bit_cast<float>(a | sign), overflow);
        const uint8_t expected = want[i] | (sign ? 0x80 : 0);
        if (got != expected && local++ < 3) {
#pragma omp critical
          ADD_FAILURE() << name(format) << " bits 0x" << std::hex << (a | sign) << ": got 0x" << int(got)
                        << ", reference 0x" << int(expected);
        }
      }
    }
    return local;
  });
  EXPECT_EQ(bad, 0u);
}

// Every float32 bit pattern through the bulk quantize_fp8 (widest SIMD path), scale 1, saturating.
void exhaustive_bulk(Fp8Format format) {
  const Reference& r = reference(format);
  const uint32_t step = stride();
  const uint64_t bad = sweep([&](uint32_t begin, uint32_t end) {
    thread_local std::vector<float> x;
    thread_local std::vector<uint8_t> q, want;
    reference_codes(r, begin, end, step, Overflow::Saturate, want);  // shared by both signs
    const size_t n = want.size();
    x.resize(n), q.resize(n);
    uint64_t local = 0;
    for (uint32_t sign : {0u, 0x80000000u}) {
      for (size_t i = 0; i < n; ++i) x[i] = std::bit_cast<float>((begin + static_cast<uint32_t>(i) * step) | sign);
      quantize_fp8(x, 1.0f, format, q);
      const uint8_t sign_bit = sign ? 0x80 : 0x00;
      for (size_t i = 0; i < n; ++i) {
        if (q[i] != (want[i] | sign_bit) && local++ < 3) {
#pragma omp critical
          ADD_FAILURE() << name(format) << " bulk (" << name(active_simd_path()) << ") bits 0x" << std::hex
                        << ((begin + static_cast<uint32_t>(i) * step) | sign) << ": got 0x" << int(q[i])
                        << ", reference 0x" << int(want[i] | sign_bit);
        }
      }
    }
    return local;
  });
  EXPECT_EQ(bad, 0u);
}

TEST(CastExhaustive, E4M3Saturate) { exhaustive_scalar<Fp8Format::E4M3, Overflow::Saturate>(); }
TEST(CastExhaustive, E4M3NonSaturating) { exhaustive_scalar<Fp8Format::E4M3, Overflow::NonSaturating>(); }
TEST(CastExhaustive, E5M2Saturate) { exhaustive_scalar<Fp8Format::E5M2, Overflow::Saturate>(); }
TEST(CastExhaustive, E5M2NonSaturating) { exhaustive_scalar<Fp8Format::E5M2, Overflow::NonSaturating>(); }
TEST(CastExhaustive, BulkE4M3Saturate) { exhaustive_bulk(Fp8Format::E4M3); }
TEST(CastExhaustive, BulkE5M2Saturate) { exhaustive_bulk(Fp8Format::E5M2); }

// float32 -> bf16 on every pattern against nearest-even written out: the candidates are the truncation
// and the next bf16 up in magnitude; NaN stays NaN.
TEST(CastExhaustive, Bf16) {
  const uint32_t step = stride();
  std::atomic<uint64_t> bad{0};
#pragma omp parallel for schedule(dynamic, 16)
  for (int64_t hi = 0; hi < 65536; ++hi) {  // the upper 16 bits: the truncated bf16
    uint64_t local = 0;
    const auto truncated = static_cast<uint32_t>(hi) << 16;
    for (uint32_t lo = 0; lo < 65536; lo += step) {
      const uint32_t bits = truncated | lo;
      const float x = std::bit_cast<float>(bits);
      const uint16_t got = float_to_bf16(x);
      if (std::isnan(x)) {
        local += !std::isnan(bf16_to_float(got)) || ((got ^ (bits >> 16)) & 0x8000) != 0;
        continue;
      }
      const double down = std::bit_cast<float>(truncated);
      const double up = (bits & 0x7FFFFFFFu) >= 0x7F7F0000u ? std::copysign(std::ldexp(1.0, 128), down)  // past FLT_MAX: inf
                                                             : std::bit_cast<float>(truncated + 0x10000u);
      const double dx = x, ddown = std::fabs(dx - down), dup = std::fabs(up - dx);
      const bool take_up = dup < ddown || (dup == ddown && (hi & 1));
      const uint16_t want = static_cast<uint16_t>(take_up ? hi + 1 : hi);
      if (got != want && local++ < 3) {
#pragma omp critical
        ADD_FAILURE() << "bf16 of bits 0x" << std::hex << bits << ": got 0x" << got << ", want 0x" << want;
      }
    }
    bad += local;
  }
  EXPECT_EQ(bad.load(), 0u);
}

// The sweeps fill reference codes from precomputed rounding boundaries; check those against the
// one-value-at-a-time nearest search on every pattern within 2 ulps of a boundary, and at random.
TEST(CastReference, BoundariesAgreeWithNearestSearch) {
  for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    const Reference& r = reference(format);
    ASSERT_TRUE(std::is_sorted(r.values.begin(), r.values.end()));
    ASSERT_TRUE(std::adjacent_find(r.values.begin(), r.values.end()) == r.values.end());
    std::vector<uint32_t> probes;
    for (uint32_t s : r.starts) {
      for (int d = -2; d <= 2; ++d) probes.push_back(s + static_cast<uint32_t>(d));
    }
    std::mt19937 rng(1);
    for (int i = 0; i < 1000000; ++i) probes.push_back(static_cast<uint32_t>(rng()) & 0x7FFFFFFFu);
    for (uint32_t a : probes) {
      if (a > 0x7F800000u) continue;
      const size_t code = static_cast<size_t>(std::upper_bound(r.starts.begin(), r.starts.end(), a) - r.starts.begin()) - 1;
      for (Overflow overflow : {Overflow::Saturate, Overflow::NonSaturating}) {
        ASSERT_EQ(finish(r, code, overflow), nearest_reference(std::bit_cast<float>(a), format, overflow))
            << name(format) << " bits 0x" << std::hex << a;
      }
    }
  }
}

TEST(CastReference, AllDecodes) {
  for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    const Reference& r = reference(format);
    for (int code = 0; code < 256; ++code) {
      const float got = decode_fp8(static_cast<uint8_t>(code), format);
      const int magnitude = code & 0x7F;
      const double sign = code & 0x80 ? -1.0 : 1.0;
      if (format == Fp8Format::E4M3 && magnitude == 0x7F) {
        EXPECT_TRUE(std::isnan(got)) << code;
      } else if (format == Fp8Format::E5M2 && magnitude > 0x7C) {
        EXPECT_TRUE(std::isnan(got)) << code;
      } else if (format == Fp8Format::E5M2 && magnitude == 0x7C) {
        EXPECT_EQ(got, sign * std::numeric_limits<float>::infinity()) << code;
      } else {
        EXPECT_EQ(static_cast<double>(got), sign * r.values[magnitude]) << code;
        EXPECT_EQ(std::signbit(got), (code & 0x80) != 0) << code;  // 0x80 is -0
        // Encoding a decoded value gives the code back (both policies).
        EXPECT_EQ(encode_fp8(got, format, Overflow::Saturate), code);
        EXPECT_EQ(encode_fp8(got, format, Overflow::NonSaturating), code);
      }
    }
  }
  EXPECT_EQ(decode_fp8(0x7E, Fp8Format::E4M3), 448.0f);
  EXPECT_EQ(decode_fp8(0x08, Fp8Format::E4M3), 0x1p-6f);
  EXPECT_EQ(decode_fp8(0x01, Fp8Format::E4M3), 0x1p-9f);
  EXPECT_EQ(decode_fp8(0x7B, Fp8Format::E5M2), 57344.0f);
  EXPECT_EQ(decode_fp8(0x04, Fp8Format::E5M2), 0x1p-14f);
  EXPECT_EQ(decode_fp8(0x01, Fp8Format::E5M2), 0x1p-16f);
}

// The spec's named cases (spec/fp8-numerics.md, "Casting float32 to FP8").
TEST(CastSpec, RoundingCases) {
  const auto e4m3 = [](float x) { return decode_fp8(encode_fp8(x, Fp8Format::E4M3), Fp8Format::E4M3); };
  EXPECT_EQ(e4m3(464.0f), 448.0f);           // tie between 448 and 480 goes to even 448
  EXPECT_EQ(e4m3(1.0625f), 1.0f);            // tie between 1.0 and 1.125
  EXPECT_EQ(e4m3(1.1875f), 1.25f);           // tie between 1.125 and 1.25
  EXPECT_EQ(encode_fp8(0x1p-10f, Fp8Format::E4M3), 0x00);  // half the smallest subnormal -> +0
  EXPECT_EQ(e4m3(1.5f * 0x1p-10f), 0x1p-9f);
  EXPECT_EQ(encode_fp8(-0x1p-10f, Fp8Format::E4M3), 0x80);  // -> -0: signed zero kept
  EXPECT_EQ(encode_fp8(0.0f, Fp8Format::E4M3), 0x00);
  EXPECT_EQ(encode_fp8(-0.0f, Fp8Format::E4M3), 0x80);
  EXPECT_EQ(encode_fp8(-0.0f, Fp8Format::E5M2), 0x80);
}

TEST(CastSpec, OverflowTable) {
  constexpr float inf = std::numeric_limits<float>::infinity();
  const auto E4 = Fp8Format::E4M3, E5 = Fp8Format::E5M2;
  const auto sat = Overflow::Saturate, non = Overflow::NonSaturating;
  // E4M3: 448 < |x| <= 464 -> +-448 under both policies.
  for (float x : {448.5f, 460.0f, 464.0f}) {
    EXPECT_EQ(encode_fp8(x, E4, sat), 0x7E);
    EXPECT_EQ(encode_fp8(x, E4, non), 0x7E);
    EXPECT_EQ(encode_fp8(-x, E4, non), 0xFE);
  }
  // E4M3: |x| > 464 finite, and inf -> +-448 saturating, NaN non-saturating.
  for (float x : {std::nextafter(464.0f, inf), 480.0f, 1e6f, std::numeric_limits<float>::max(), inf}) {
    EXPECT_EQ(encode_fp8(x, E4, sat), 0x7E) << x;
    EXPECT_EQ(encode_fp8(-x, E4, sat), 0xFE) << x;
    EXPECT_TRUE(std::isnan(decode_fp8(encode_fp8(x, E4, non), E4))) << x;
    EXPECT_TRUE(std::isnan(decode_fp8(encode_fp8(-x, E4, non), E4))) << x;
  }
  // E5M2: |x| >= 61440 (the tie goes up) -> +-57344 saturating, +-inf non-saturating.
  EXPECT_EQ(encode_fp8(std::nextafter(61440.0f, 0.0f), E5, non), 0x7B);
  for (float x : {61440.0f, 65536.0f, 1e9f, inf}) {
    EXPECT_EQ(encode_fp8(x, E5, sat), 0x7B) << x;
    EXPECT_EQ(encode_fp8(-x, E5, sat), 0xFB) << x;
    EXPECT_EQ(encode_fp8(x, E5, non), 0x7C) << x;
    EXPECT_EQ(encode_fp8(-x, E5, non), 0xFC) << x;
  }
}

TEST(CastSpec, NaN) {
  for (Overflow overflow : {Overflow::Saturate, Overflow::NonSaturating}) {
    for (float nan : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::signaling_NaN()}) {
      EXPECT_TRUE(std::isnan(decode_fp8(encode_fp8(nan, Fp8Format::E4M3, overflow), Fp8Format::E4M3)));
      EXPECT_TRUE(std::isnan(decode_fp8(encode_fp8(nan, Fp8Format::E5M2, overflow), Fp8Format::E5M2)));
    }
  }
  EXPECT_EQ(encode_fp8(std::numeric_limits<float>::quiet_NaN(), Fp8Format::E4M3), 0x7F);
  EXPECT_EQ(encode_fp8(-std::numeric_limits<float>::quiet_NaN(), Fp8Format::E4M3), 0xFF);
  EXPECT_EQ(encode_fp8(std::numeric_limits<float>::quiet_NaN(), Fp8Format::E5M2), 0x7E);
}

}  // namespace
}  // namespace fp8kit
