// Tensor-level FP8 quantization on the CPU against the scalar casts: codes, transposed codes, amax,
// scale_inv, current scaling at every granularity (against a slow per-element reference),
// dequantization, and the errors for bad arguments.
#include "ops/quantize.h"

#include "base/error.h"
#include "common/gradient_check.h"
#include "common/host_tensors.h"
#include "numerics/cast.h"
#include "ops/context.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace fp8kit::ops {
namespace {

TEST(QuantizeTensor, CodesTransposeAmaxAndScaleInvMatchTheScalarCast) {
  const int64_t rows = 5, cols = 7;
  std::vector<float> x = testing::random_vector(rows * cols, 11, -300.0f, 300.0f);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[8] = -1000.0f;  // saturates to -448 after scaling by 0.5
  for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    const Tensor scale = testing::scalar_tensor(0.5f);
    const QTensor q = quantize(testing::host_tensor(x, {rows, cols}), {.format = format}, &scale, true);
    ASSERT_EQ(q.codes.shape(), (std::vector<int64_t>{rows, cols}));
    ASSERT_EQ(q.codes_t.shape(), (std::vector<int64_t>{cols, rows}));
    EXPECT_EQ(q.codes.dtype(), dtype_of(format));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t want = encode_fp8(x[r * cols + c] * 0.5f, format);
        EXPECT_EQ(q.codes.data<uint8_t>()[r * cols + c], want) << r << "," << c;
        EXPECT_EQ(q.codes_t.data<uint8_t>()[c * rows + r], want) << r << "," << c;
      }
    }
    EXPECT_EQ(q.amax.data<float>()[0], 1000.0f);  // NaN ignored
    EXPECT_EQ(q.scale_inv.data<float>()[0], 2.0f);
  }
}

TEST(QuantizeTensor, Bf16InputAndVectors) {
  Tensor x({4}, DType::Bf16);
  const float values[] = {1.0f, -2.5f, 0.3f, 100.0f};
  for (int i = 0; i < 4; ++i) x.data<uint16_t>()[i] = float_to_bf16(values[i]);
  const Tensor scale = testing::scalar_tensor(2.0f);
  const QTensor q = quantize(x, {}, &scale);
  EXPECT_EQ(q.codes.shape(), (std::vector<int64_t>{4}));
  EXPECT_EQ(q.codes_t.numel(), 0);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(q.codes.data<uint8_t>()[i], encode_fp8(round_bf16(values[i]) * 2.0f, Fp8Format::E4M3));
  EXPECT_EQ(q.amax.data<float>()[0], 100.0f);
}

TEST(QuantizeTensor, CurrentScalingUsesTheTensorsOwnAmax) {
  const std::vector<float> x = testing::random_vector(64, 5, -3.0f, 3.0f);
  const Tensor t = testing::host_tensor(x, {8, 8});
  const QTensor q = quantize(t, {.options = {.margin = 1}});
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float scale = current_scale(amax, Fp8Format::E4M3, {.margin = 1});
  EXPECT_EQ(q.scale_inv.data<float>()[0], 1.0f / scale);
  EXPECT_EQ(q.amax.data<float>()[0], amax);
  const Tensor back = dequantize(q);
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = decode_fp8(encode_fp8(x[i] * scale, Fp8Format::E4M3), Fp8Format::E4M3) *
                       (1.0f / scale);
    EXPECT_EQ(back.data<float>()[i], want) << i;
  }
}

// Every granularity of QuantSpec, with its block extent written out independently of the code.
struct Case {
  QuantSpec spec;
  int64_t block_rows, block_cols;  // 0: the whole extent
};
const Case kCases[] = {
    {{.granularity = Granularity::PerTensor}, 0, 0},
    {{.granularity = Granularity::PerRow}, 1, 0},
    {{.granularity = Granularity::PerGroup, .group = 32}, 1, 32},
    {{.granularity = Granularity::PerGroup, .group = 64}, 1, 64},
    {{.granularity = Granularity::PerGroup, .group = 128}, 1, 128},
    {{.granularity = Granularity::Block1x128}, 1, 128},
    {{.granularity = Granularity::Block128x128}, 128, 128},
    {{.granularity = Granularity::Block128x128, .options = {.margin = 2, .power_of_two = true}}, 128, 128},
};

// Rows of magnitudes 1e-3 .. 1e2 so that block scales differ; a zero block, +-inf and NaN.
std::vector<float> awkward_matrix(int64_t rows, int64_t cols, uint32_t seed) {
  std::vector<float> x = testing::random_vector(rows * cols, seed, -1.0f, 1.0f);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) x[r * cols + c] *= std::pow(10.0f, static_cast<float>(r % 6) - 3.0f) * (1 + c % 5);
  for (int64_t c = 0; c < std::min<int64_t>(cols, 40); ++c) x[c] = 0.0f;  // row 0's first group: all zeros
  if (rows * cols > 50) {
    x[rows * cols / 2] = std::numeric_limits<float>::infinity();
    x[rows * cols / 3] = -std::numeric_limits<float>::infinity();
    x[rows * cols / 5] = std::numeric_limits<float>::quiet_NaN();
    x[rows * cols - 1] = -std::numeric_limits<float>::quiet_NaN();
  }
  return x;
}

TEST(QuantizeTensor, EveryGranularityMatchesASlowReference) {
  struct Shape {
    int64_t rows, cols;
  };
  for (const Shape& s : {Shape{1, 300}, Shape{217, 300}, Shape{130, 257}, Shape{3, 64}}) {
    for (DType x_type : {DType::F32, DType::Bf16}) {
      for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
        for (const Case& c : kCases) {
          QuantSpec spec = c.spec;
          spec.format = format;
          const Tensor x = testing::host_tensor(awkward_matrix(s.rows, s.cols, 3), {s.rows, s.cols}, x_type);
          const std::vector<float> values = testing::float_values(x);  // bf16 rounded, as quantize sees them
          const bool transpose = spec.granularity == Granularity::Block128x128 || spec.granularity == Granularity::PerTensor;
          const QTensor q = quantize(x, spec, nullptr, transpose);
          const int64_t br = c.block_rows == 0 ? s.rows : c.block_rows, bc = c.block_cols == 0 ? s.cols : c.block_cols;
          const int64_t grid_rows = (s.rows + br - 1) / br, grid_cols = (s.cols + bc - 1) / bc;
          const std::string what = fmt::format("{}x{} {} {} {} group {}", s.rows, s.cols, name(x_type), name(format),
                                               name(spec.granularity), spec.group);
          ASSERT_EQ(q.scale_inv.numel(), grid_rows * grid_cols) << what;
          ASSERT_EQ(q.amax.numel(), grid_rows * grid_cols) << what;
          ASSERT_EQ(q.codes_t.numel(), transpose ? s.rows * s.cols : 0) << what;
          for (int64_t gr = 0; gr < grid_rows; ++gr) {
            for (int64_t gc = 0; gc < grid_cols; ++gc) {
              float amax = 0.0f;  // NaN ignored, inf counted
              for (int64_t r = gr * br; r < std::min(s.rows, (gr + 1) * br); ++r)
                for (int64_t col = gc * bc; col < std::min(s.cols, (gc + 1) * bc); ++col)
                  if (!std::isnan(values[r * s.cols + col])) amax = std::max(amax, std::fabs(values[r * s.cols + col]));
              const float scale = current_scale(amax, format, spec.options);
              ASSERT_EQ(q.amax.data<float>()[gr * grid_cols + gc], amax) << what << " block " << gr << "," << gc;
              ASSERT_EQ(q.scale_inv.data<float>()[gr * grid_cols + gc], 1.0f / scale) << what;
              for (int64_t r = gr * br; r < std::min(s.rows, (gr + 1) * br); ++r) {
                for (int64_t col = gc * bc; col < std::min(s.cols, (gc + 1) * bc); ++col) {
                  const uint8_t want = encode_fp8(values[r * s.cols + col] * scale, format);
                  ASSERT_EQ(q.codes.data<uint8_t>()[r * s.cols + col], want) << what << " at " << r << "," << col;
                  if (transpose) {
                    ASSERT_EQ(q.codes_t.data<uint8_t>()[col * s.rows + r], want) << what;
                  }
                }
              }
            }
          }
          const Tensor back = dequantize(q);
          for (int64_t i = 0; i < s.rows * s.cols; ++i) {
            const int64_t r = i / s.cols, col = i % s.cols;
            const float want = decode_fp8(q.codes.data<uint8_t>()[i], format) *
                               q.scale_inv.data<float>()[r / br * grid_cols + col / bc];
            if (std::isnan(want)) {
              ASSERT_TRUE(std::isnan(back.data<float>()[i])) << what;
            } else {
              ASSERT_EQ(back.data<float>()[i], want) << what << " at " << i;
            }
          }
        }
      }
    }
  }
}

TEST(QuantizeTensor, EmptyAndOneElementTensors) {
  for (const Case& c : kCases) {
    const QTensor empty = quantize(Tensor({0, 5}, DType::F32), c.spec);
    EXPECT_EQ(empty.codes.numel(), 0);
    EXPECT_EQ(dequantize(empty).numel(), 0);
    const QTensor one = quantize(testing::host_tensor({-3.0f}, {1, 1}), c.spec);
    EXPECT_EQ(one.amax.data<float>()[0], 3.0f) << name(c.spec.granularity);
    EXPECT_NEAR(dequantize(one).data<float>()[0], -3.0f, 1e-5) << name(c.spec.granularity);
    Context cpu(Device::Cpu, 0);
    EXPECT_EQ(dequantize(cpu, one).data<float>()[0], dequantize(one).data<float>()[0]);
  }
}

TEST(QuantizeTensor, BadArgumentsSayWhatToFix) {
  const Tensor x({2, 2}, DType::F32);
  const Tensor zero = testing::scalar_tensor(0.0f), inf = testing::scalar_tensor(std::numeric_limits<float>::infinity());
  const Tensor one = testing::scalar_tensor(1.0f), two({2}, DType::F32);
  EXPECT_THROW(quantize(x, {}, &zero), Error);
  EXPECT_THROW(quantize(x, {}, &inf), Error);
  EXPECT_THROW(quantize(x, {}, &two), Error);
  EXPECT_THROW(quantize(Tensor({2, 2, 2}, DType::F32), {}, &one), Error);
  EXPECT_THROW(quantize(Tensor({2, 2}, DType::I32), {}, &one), Error);
  // A delayed scale is per tensor; groups are 32, 64 or 128; a row's or group's scales do not transpose.
  EXPECT_THROW(quantize(x, {.granularity = Granularity::PerRow}, &one), Error);
  EXPECT_THROW(quantize(x, {.granularity = Granularity::PerGroup, .group = 48}), Error);
  EXPECT_THROW(quantize(x, {.granularity = Granularity::Block1x128}, nullptr, true), Error);
  EXPECT_NO_THROW(quantize(x, {.granularity = Granularity::Block128x128}, nullptr, true));
}

}  // namespace
}  // namespace fp8kit::ops

namespace fp8kit::ops {
namespace {

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const auto* p = static_cast<const uint8_t*>(static_cast<const void*>(t.data<std::byte>()));
  return {p, p + t.nbytes()};
}

void expect_same(const QTensor& a, const QTensor& b, const std::string& what) {
  for (auto [x, y, name] : {std::tuple{&a.codes, &b.codes, "codes"}, std::tuple{&a.codes_t, &b.codes_t, "codes_t"},
                            std::tuple{&a.scale_inv, &b.scale_inv, "scale_inv"}, std::tuple{&a.amax, &b.amax, "amax"}}) {
    EXPECT_EQ(x->shape(), y->shape()) << what << " " << name;
    EXPECT_EQ(x->dtype(), y->dtype()) << what << " " << name;
    EXPECT_EQ(bytes_of(*x), bytes_of(*y)) << what << " " << name;
  }
}

TEST(QuantizeOnAContext, GivesQuantizesBytesAndReusesItsOutputs) {
  Context c;
  const std::vector<float> x = testing::random_vector(130 * 200, 17, -5.0f, 5.0f);
  const Tensor t = testing::host_tensor(x, {130, 200});
  const Tensor scale = testing::scalar_tensor(4.0f);
  const QuantSpec specs[] = {{}, {.granularity = Granularity::PerRow}, {.granularity = Granularity::PerGroup, .group = 32},
                             {.granularity = Granularity::PerGroup, .group = 128},
                             {.format = Fp8Format::E5M2, .granularity = Granularity::Block128x128}};
  for (const QuantSpec& spec : specs) {
    const bool transpose = spec.granularity == Granularity::PerTensor || spec.granularity == Granularity::Block128x128;
    const std::string what(name(spec.granularity));
    QTensor q;
    quantize(c, t, spec, q, nullptr, transpose);
    expect_same(q, quantize(t, spec, nullptr, transpose), what);
    // The same shapes again: the same storage, rewritten (here from other values).
    const void* codes = q.codes.data<std::byte>();
    const void* scales = q.scale_inv.data<std::byte>();
    const Tensor t2 = testing::host_tensor(testing::random_vector(130 * 200, 18), {130, 200});
    quantize(c, t2, spec, q, nullptr, transpose);
    EXPECT_EQ(q.codes.data<std::byte>(), codes) << what;
    EXPECT_EQ(q.scale_inv.data<std::byte>(), scales) << what;
    expect_same(q, quantize(t2, spec, nullptr, transpose), what + " again");
  }
  QTensor q;
  quantize(c, t, {}, q, &scale, true);  // a delayed scale
  expect_same(q, quantize(t, {}, &scale, true), "delayed");
}

TEST(QuantizeOnAContext, ATransposedBlockOperandIsTheQuantizedTranspose) {
  // 128 x 128 blocks hold the same values transposed: q's codes_t with its scale grid transposed are
  // quantize(x^T)'s bytes, at shapes with partial blocks.
  Context c;
  for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{200, 300}, {1, 129}, {257, 64}}) {
    const std::vector<float> x = testing::random_vector(rows * cols, 19, -3.0f, 3.0f);
    std::vector<float> x_t(x.size());
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = 0; k < cols; ++k) x_t[k * rows + r] = x[r * cols + k];
    const QuantSpec spec{.granularity = Granularity::Block128x128};
    QTensor q, t;
    quantize(c, testing::host_tensor(x, {rows, cols}), spec, q, nullptr, true);
    transpose(c, q, t);
    QTensor want;
    quantize(c, testing::host_tensor(x_t, {cols, rows}), spec, want);
    EXPECT_TRUE(t.codes.shares_storage(q.codes_t));
    expect_same(t, want, fmt::format("{}x{}", rows, cols));
  }
  QTensor q, t;
  quantize(c, testing::host_tensor({1, 2, 3, 4}, {2, 2}), {.granularity = Granularity::PerRow}, q);
  EXPECT_THROW(transpose(c, q, t), Error);  // a row's scales do not transpose
}

}  // namespace
}  // namespace fp8kit::ops
