// Bulk conversions (convert.h) against the scalar casts of cast.h, on every SIMD path this CPU runs,
// single- and multi-threaded, over random bit patterns, special values and awkward lengths.
#include "numerics/convert.h"

#include "base/error.h"
#include "numerics/cast.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace fp8kit {
namespace {


// Random float32 bit patterns (NaN, inf, subnormals included) mixed with values near FP8's range.
std::vector<float> test_values(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 20);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    switch (rng() % 4) {
      case 0:
        x[i] = std::bit_cast<float>(static_cast<uint32_t>(rng()));
        break;
      default:
        x[i] = std::ldexp(normal(rng), exponent(rng));
    }
  }
  const float specials[] = {0.0f, -0.0f, 448.0f, 464.0f, -464.0f, 480.0f, 57344.0f, 61440.0f, 0x1p-10f, 1.5f * 0x1p-10f,
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::denorm_min(), std::numeric_limits<float>::max()};
  for (size_t i = 0; i < std::size(specials) && i < n; ++i) x[(i * 7919) % n] = specials[i];
  return x;
}

float reference_amax(const std::vector<float>& x) {
  float m = 0.0f;
  for (float v : x) {
    if (!std::isnan(v)) m = std::max(m, std::fabs(v));
  }
  return m;
}

const size_t kSizes[] = {0, 1, 7, 31, 32, 33, 100, 1000, 4099, kParallelMinElements + 12345};
const float kScales[] = {1.0f, 0.0078125f, 3.7f, 1e-20f, 1e20f};

class ConvertPaths : public ::testing::TestWithParam<SimdPath> {
 protected:
  void SetUp() override { set_simd_path(GetParam()); }
  void TearDown() override { set_simd_path(SimdPath::Auto); }
};

TEST_P(ConvertPaths, QuantizeFloatMatchesScalarCast) {
  for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    for (size_t n : kSizes) {
      const std::vector<float> x = test_values(n, static_cast<uint32_t>(n) + 1);
      for (float scale : kScales) {
        std::vector<uint8_t> out(n, 0xAA);
        const float a = quantize_fp8(x, scale, format, out);
        EXPECT_EQ(std::bit_cast<uint32_t>(a), std::bit_cast<uint32_t>(reference_amax(x))) << n;
        size_t mismatches = 0;
        for (size_t i = 0; i < n; ++i) {
          const uint8_t expected = encode_fp8(x[i] * scale, format, Overflow::Saturate);
          if (out[i] != expected && mismatches++ < 5) {
            ADD_FAILURE() << name(format) << " x=" << x[i] << " scale=" << scale << " got " << int(out[i])
                          << " want " << int(expected);
          }
        }
        EXPECT_EQ(mismatches, 0u) << name(format) << " n=" << n << " scale=" << scale;
      }
    }
  }
}

TEST_P(ConvertPaths, QuantizeDivideMatchesScalarCast) {
  for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    const std::vector<float> x = test_values(5000, 77);
    for (float multiplier : {1.0f, 3.0f, 0.1f, 1.0f / 448.0f}) {
      std::vector<uint8_t> out(x.size());
      quantize_fp8_divide(x, multiplier, format, out);
      for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_EQ(out[i], encode_fp8(x[i] / multiplier, format)) << x[i] << " / " << multiplier;
      }
    }
  }
}

TEST_P(ConvertPaths, QuantizeBf16MatchesScalarCast) {
  std::mt19937 rng(5);
  for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    for (size_t n : kSizes) {
      std::vector<uint16_t> x(n);
      for (auto& h : x) h = static_cast<uint16_t>(rng());
      for (float scale : {1.0f, 0.25f, 5.5f}) {
        std::vector<uint8_t> out(n);
        const float a = quantize_fp8(x, scale, format, out);
        float expected_amax = 0.0f;
        for (size_t i = 0; i < n; ++i) {
          const float v = bf16_to_float(x[i]);
          if (!std::isnan(v)) expected_amax = std::max(expected_amax, std::fabs(v));
          ASSERT_EQ(out[i], encode_fp8(v * scale, format)) << "bf16 0x" << std::hex << x[i];
        }
        EXPECT_EQ(a, expected_amax);
      }
    }
  }
}

TEST_P(ConvertPaths, AmaxIgnoresNanAndCountsInf) {
  for (size_t n : kSizes) {
    std::vector<float> x = test_values(n, 99);
    EXPECT_EQ(std::bit_cast<uint32_t>(amax(x)), std::bit_cast<uint32_t>(reference_amax(x))) << n;
  }
  std::vector<float> x(1000, -2.0f);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(amax(x), 2.0f);
  x[999] = -std::numeric_limits<float>::infinity();
  EXPECT_EQ(amax(x), std::numeric_limits<float>::infinity());
  std::vector<float> nans(100, std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(amax(nans), 0.0f);
  EXPECT_EQ(amax(std::span<const float>{}), 0.0f);
}

INSTANTIATE_TEST_SUITE_P(EveryPath, ConvertPaths, ::testing::ValuesIn(supported_simd_paths()),
                         [](const auto& info) { return std::string(name(info.param)); });

TEST(Convert, DequantizeIsDecodeTimesScaleInv) {
  std::vector<uint8_t> q(256 * 3 + 5);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<uint8_t>(i * 37);
  for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    for (float scale_inv : {1.0f, 0.01f, 1024.0f}) {
      std::vector<float> out(q.size());
      dequantize_fp8(q, format, scale_inv, out);
      for (size_t i = 0; i < q.size(); ++i) {
        const float expected = decode_fp8(q[i], format) * scale_inv;
        if (std::isnan(expected)) {
          EXPECT_TRUE(std::isnan(out[i]));
        } else {
          EXPECT_EQ(out[i], expected);
        }
      }
    }
  }
}

TEST(Convert, QuantizeThenDequantizeIsWithinHalfAStep) {
  const std::vector<float> x = [] {
    std::mt19937 rng(3);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> v(kParallelMinElements * 2);
    for (auto& e : v) e = normal(rng);
    return v;
  }();
  std::vector<uint8_t> q(x.size());
  const float scale = 448.0f / amax(x);
  quantize_fp8(x, scale, Fp8Format::E4M3, q);
  std::vector<float> back(x.size());
  dequantize_fp8(q, Fp8Format::E4M3, 1.0f / scale, back);
  for (size_t i = 0; i < x.size(); ++i) {
    // E4M3 keeps 3 mantissa bits: relative error <= 2^-4 for normals, abs <= 2^-10 / scale below.
    ASSERT_LE(std::fabs(back[i] - x[i]), std::max(std::fabs(x[i]) * 0x1p-4f, 0x1p-10f / scale) * 1.0001f) << x[i];
  }
}

TEST(Convert, Bf16ArrayConversionsMatchScalar) {
  const std::vector<float> x = test_values(kParallelMinElements + 3, 11);
  std::vector<uint16_t> h(x.size());
  float_to_bf16(x, h);
  std::vector<float> rounded(x.size());
  round_bf16(x, rounded);
  std::vector<float> back(x.size());
  bf16_to_float(h, back);
  for (size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(h[i], float_to_bf16(x[i]));
    ASSERT_EQ(std::bit_cast<uint32_t>(rounded[i]), std::bit_cast<uint32_t>(round_bf16(x[i])));
    ASSERT_EQ(std::bit_cast<uint32_t>(back[i]), std::bit_cast<uint32_t>(bf16_to_float(h[i])));
  }
  std::vector<float> in_place = x;
  round_bf16(in_place, in_place);
  EXPECT_EQ(0, std::memcmp(in_place.data(), rounded.data(), x.size() * sizeof(float)));
}

TEST(Convert, BadArgumentsThrow) {
  std::vector<float> x(4, 1.0f);
  std::vector<uint8_t> out(3);
  EXPECT_THROW(quantize_fp8(x, 1.0f, Fp8Format::E4M3, out), Error);
  out.resize(4);
  EXPECT_THROW(quantize_fp8(x, 0.0f, Fp8Format::E4M3, out), Error);
  EXPECT_THROW(quantize_fp8(x, std::numeric_limits<float>::infinity(), Fp8Format::E4M3, out), Error);
  EXPECT_THROW(quantize_fp8(x, std::numeric_limits<float>::quiet_NaN(), Fp8Format::E4M3, out), Error);
  EXPECT_THROW(quantize_fp8_divide(x, 0.0f, Fp8Format::E4M3, out), Error);
  std::vector<float> back(5);
  EXPECT_THROW(dequantize_fp8(out, Fp8Format::E4M3, 1.0f, back), Error);
}

TEST(Convert, PathSelection) {
  const auto paths = supported_simd_paths();
  ASSERT_FALSE(paths.empty());
  EXPECT_EQ(paths.front(), SimdPath::Portable);
  for (SimdPath p : paths) {
    set_simd_path(p);
    EXPECT_EQ(active_simd_path(), p);
  }
  set_simd_path(SimdPath::Auto);
  EXPECT_EQ(active_simd_path(), paths.back());
  for (SimdPath p : {SimdPath::Avx2, SimdPath::Avx512}) {
    if (std::find(paths.begin(), paths.end(), p) == paths.end()) {
      EXPECT_THROW(set_simd_path(p), Error);
    }
  }
}

}  // namespace
}  // namespace fp8kit
