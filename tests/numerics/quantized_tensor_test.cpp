// Quantized tensors (quantized_tensor.h) at every granularity against a slow per-element reference,
// round-trip error bounds, and the edge cases: partial blocks, zero blocks, inf and NaN.
#include "numerics/quantized_tensor.h"

#include "base/error.h"
#include "numerics/cast.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace fp8kit {
namespace {

struct Shape {
  size_t rows, cols;
};
const Shape kShapes[] = {{1, 1}, {1, 17}, {5, 160}, {217, 256}, {130, 1100}, {600, 300}};
const Granularity kGranularities[] = {Granularity::PerTensor, Granularity::PerRow, Granularity::PerGroup,
                                      Granularity::Block1x128, Granularity::Block128x128};

// Rows of different magnitudes (1e-3 .. 1e2) so per-row/per-block scales differ.
std::vector<float> matrix(Shape s, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(s.rows * s.cols);
  for (size_t r = 0; r < s.rows; ++r) {
    const float magnitude = std::pow(10.0f, static_cast<float>(r % 6) - 3.0f);
    for (size_t c = 0; c < s.cols; ++c) x[r * s.cols + c] = normal(rng) * magnitude * (1.0f + static_cast<float>(c % 7));
  }
  return x;
}

// Block extents written out from the spec's table, independently of quantize().
Shape block_of(Granularity g, Shape s, size_t group) {
  switch (g) {
    case Granularity::PerTensor:
      return s;
    case Granularity::PerRow:
      return {1, s.cols};
    case Granularity::PerGroup:
      return {1, group};
    case Granularity::Block1x128:
      return {1, 128};
    case Granularity::Block128x128:
      return {128, 128};
  }
  return s;
}

// Slow reference: each block's amax by a scan of all elements, then each element cast on its own.
void expect_matches_reference(const std::vector<float>& x, Shape s, Fp8Format f, Granularity g, size_t group) {
  const QuantizedTensor q = quantize(x, s.rows, s.cols, f, g, group);
  const Shape b = block_of(g, s, group);
  const size_t grid_rows = (s.rows + b.rows - 1) / b.rows, grid_cols = (s.cols + b.cols - 1) / b.cols;
  ASSERT_EQ(q.data.size(), x.size());
  ASSERT_EQ(q.scale_inv.size(), grid_rows * grid_cols);
  std::vector<float> block_amax(grid_rows * grid_cols, 0.0f);
  for (size_t r = 0; r < s.rows; ++r) {
    for (size_t c = 0; c < s.cols; ++c) {
      float& a = block_amax[(r / b.rows) * grid_cols + c / b.cols];
      if (!std::isnan(x[r * s.cols + c])) a = std::max(a, std::fabs(x[r * s.cols + c]));
    }
  }
  for (size_t r = 0; r < s.rows; ++r) {
    for (size_t c = 0; c < s.cols; ++c) {
      const float a = block_amax[(r / b.rows) * grid_cols + c / b.cols];
      const float scale = a > 0.0f && std::isfinite(a) ? fp8_max(f) / a : 1.0f;
      ASSERT_EQ(q.scale_inv_at(r, c), 1.0f / scale) << name(g) << " at " << r << "," << c;
      ASSERT_EQ(q.data[r * s.cols + c], encode_fp8(x[r * s.cols + c] * scale, f)) << name(g) << " at " << r << "," << c;
    }
  }
}

TEST(QuantizedTensor, MatchesSlowReferenceAtEveryGranularity) {
  for (Shape s : kShapes) {
    const std::vector<float> x = matrix(s, 7);
    for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
      for (Granularity g : kGranularities) {
        SCOPED_TRACE(::testing::Message() << s.rows << "x" << s.cols << " " << name(f) << " " << name(g));
        expect_matches_reference(x, s, f, g, 64);
      }
    }
  }
}

TEST(QuantizedTensor, GroupSizesThatDoNotDivideK) {
  const Shape s{5, 160};
  const std::vector<float> x = matrix(s, 8);
  for (size_t group : {1, 32, 64, 100, 160, 1000}) {
    SCOPED_TRACE(group);
    expect_matches_reference(x, s, Fp8Format::E4M3, Granularity::PerGroup, group);
  }
  const QuantizedTensor q = quantize(x, s.rows, s.cols, Fp8Format::E4M3, Granularity::PerGroup, 64);
  EXPECT_EQ(q.scale_cols(), 3u);  // 64 + 64 + 32
}

TEST(QuantizedTensor, PartialEdgeBlocks) {
  const Shape s{217, 256};
  const QuantizedTensor q = quantize(matrix(s, 9), s.rows, s.cols, Fp8Format::E4M3, Granularity::Block128x128);
  EXPECT_EQ(q.block_rows, 128u);
  EXPECT_EQ(q.scale_rows(), 2u);
  EXPECT_EQ(q.scale_cols(), 2u);
  EXPECT_EQ(q.scale_inv.size(), 4u);
}

// |dequantized - x| is at most half an FP8 step: relative 2^-(m+1) for normals, and half the smallest
// subnormal (times scale_inv) below; a hair more for the float32 multiply.
TEST(QuantizedTensor, RoundTripErrorIsWithinHalfAStep) {
  for (Shape s : kShapes) {
    const std::vector<float> x = matrix(s, 11);
    for (Fp8Format f : {Fp8Format::E4M3, Fp8Format::E5M2}) {
      const float relative = std::ldexp(1.0f, -(info(f).mantissa_bits + 1));
      for (Granularity g : kGranularities) {
        const QuantizedTensor q = quantize(x, s.rows, s.cols, f, g);
        std::vector<float> back(x.size());
        dequantize(q, back);
        for (size_t r = 0; r < s.rows; ++r) {
          for (size_t c = 0; c < s.cols; ++c) {
            const float v = x[r * s.cols + c];
            const float bound = std::max(std::fabs(v) * relative, info(f).min_subnormal * 0.5f * q.scale_inv_at(r, c));
            ASSERT_LE(std::fabs(back[r * s.cols + c] - v), bound * 1.0001f)
                << s.rows << "x" << s.cols << " " << name(f) << " " << name(g) << " at " << r << "," << c;
          }
        }
      }
    }
  }
}

TEST(QuantizedTensor, FinerGranularityIsNeverWorseOnMixedRows) {
  const Shape s{217, 256};
  const std::vector<float> x = matrix(s, 12);
  auto error = [&](Granularity g) {
    const QuantizedTensor q = quantize(x, s.rows, s.cols, Fp8Format::E4M3, g);
    std::vector<float> back(x.size());
    dequantize(q, back);
    double sum = 0.0;
    for (size_t i = 0; i < x.size(); ++i) sum += std::fabs(back[i] - x[i]) / (std::fabs(x[i]) + 1e-30);
    return sum / static_cast<double>(x.size());
  };
  // Rows span 1e-3..1e2, so one tensor-wide scale flushes the small rows; per-row scales do not.
  EXPECT_LT(error(Granularity::PerRow), error(Granularity::PerTensor) * 0.5);
  EXPECT_LE(error(Granularity::PerGroup), error(Granularity::PerRow) * 1.01);
}

TEST(QuantizedTensor, ZeroBlocksGetScaleInvOne) {
  std::vector<float> x(2 * 256, 0.0f);
  for (size_t c = 128; c < 256; ++c) x[c] = 2.0f;  // row 0, second 1x128 tile
  const QuantizedTensor q = quantize(x, 2, 256, Fp8Format::E4M3, Granularity::Block1x128);
  EXPECT_EQ(q.scale_inv, (std::vector<float>{1.0f, 2.0f / 448.0f, 1.0f, 1.0f}));
  EXPECT_EQ(q.data[0], 0u);
  EXPECT_EQ(q.data[128], 0x7Eu);  // 2 * 224 = 448 = max
}

TEST(QuantizedTensor, InfAndNan) {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> x{1.0f, -inf, 0.5f, std::numeric_limits<float>::quiet_NaN(), 2.0f, 4.0f};
  const QuantizedTensor q = quantize(x, 3, 2, Fp8Format::E4M3, Granularity::PerRow);
  EXPECT_EQ(q.scale_inv[0], 1.0f);            // row with -inf: scale 1
  EXPECT_EQ(q.data[1], 0xFEu);                // -inf saturates to -448
  EXPECT_EQ(q.scale_inv[1], 0.5f / 448.0f);   // NaN ignored by the amax
  EXPECT_EQ(q.data[3], 0x7Fu);                // NaN stays NaN
  std::vector<float> back(x.size());
  dequantize(q, back);
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], -448.0f);
  EXPECT_TRUE(std::isnan(back[3]));
  EXPECT_EQ(back[5], 4.0f);
}

TEST(QuantizedTensor, EmptyAndBadShapes) {
  const QuantizedTensor empty = quantize({}, 0, 8, Fp8Format::E4M3, Granularity::PerRow);
  EXPECT_TRUE(empty.data.empty());
  EXPECT_TRUE(empty.scale_inv.empty());
  std::vector<float> none;
  dequantize(empty, none);
  std::vector<float> x(10, 1.0f);
  EXPECT_THROW(quantize(x, 3, 3, Fp8Format::E4M3, Granularity::PerRow), Error);
  EXPECT_THROW(quantize(x, 2, 5, Fp8Format::E4M3, Granularity::PerGroup, 0), Error);
  const QuantizedTensor q = quantize(x, 2, 5, Fp8Format::E4M3, Granularity::PerRow);
  std::vector<float> wrong(9);
  EXPECT_THROW(dequantize(q, wrong), Error);
}

TEST(QuantizedTensor, ParseGranularity) {
  for (Granularity g : kGranularities) EXPECT_EQ(parse_granularity(name(g)), g);
  EXPECT_THROW(parse_granularity("channel-ish"), Error);
}

}  // namespace
}  // namespace fp8kit
