// GPU dequantization and bf16 conversions against the CPU's scalar casts (numerics/cast.h), and the
// bf16 cast + transpose (with a Linear's bias + ReLU before it) against plain loops.
#include "ops/cuda/convert.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "numerics/cast.h"
#include "ops/cuda/gpu_test.h"
#include "ops/dropout.h"
#include "runtime/cuda/device_buffer.h"

namespace fp8kit::cuda {
namespace {

TEST(CudaConvert, DequantizeEveryCode) {
  FP8KIT_REQUIRE_GPU();
  // Every code 3 times over (769 elements: a ragged tail), at an offset that misaligns the vectors.
  std::vector<uint8_t> q(770);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<uint8_t>(i);
  DeviceBuffer<uint8_t> d_q(q.size());
  d_q.upload(q);
  DeviceBuffer<float> out(q.size()), scale_inv(1);
  for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2})
    for (float s : {1.0f, 0.0123f, 3e30f})
      for (size_t offset : {0, 1}) {
        const std::vector<float> s_host = {s};
        scale_inv.upload(s_host);
        const int64_t count = static_cast<int64_t>(q.size() - offset);
        dequantize_fp8(d_q.data() + offset, count, format, scale_inv.data(), out.data(), nullptr);
        const std::vector<float> got = out.to_host();
        for (int64_t i = 0; i < count; ++i) {
          const float want = decode_fp8(q[i + offset], format) * s;
          if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(got[i])) << name(format) << " code " << int(q[i + offset]);
          } else {
            EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want))
                << name(format) << " code " << int(q[i + offset]) << " scale_inv " << s;
          }
        }
      }
}

TEST(CudaConvert, FloatToBf16MatchesCpu) {
  FP8KIT_REQUIRE_GPU();
  const std::vector<float> x = testing::awkward_floats((1 << 20) + 3, 21);
  DeviceBuffer<float> d_x(x.size());
  d_x.upload(x);
  DeviceBuffer<uint16_t> out(x.size());
  float_to_bf16(d_x.data(), static_cast<int64_t>(x.size()), out.data());
  const std::vector<uint16_t> got = out.to_host();
  size_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) bad += got[i] != fp8kit::float_to_bf16(x[i]);
  EXPECT_EQ(bad, 0u);
}

TEST(CudaConvert, EveryBf16ToFloat) {
  FP8KIT_REQUIRE_GPU();
  std::vector<uint16_t> h(65536 + 1);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(i);
  DeviceBuffer<uint16_t> d_h(h.size());
  d_h.upload(h);
  DeviceBuffer<float> out(h.size());
  bf16_to_float(d_h.data(), static_cast<int64_t>(h.size()), out.data());
  const std::vector<float> got = out.to_host();
  for (size_t i = 0; i < h.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(fp8kit::bf16_to_float(h[i]))) << i;
}

// float_to_bf16_transposed over `shapes` in one call (twice over: more than one launch's 16): each
// matrix's bf16 copy and transposed copy are float_to_bf16 of its elements; with an epilogue, of
// nn::Linear's act(bf16(bf16(x) + bf16(b))) (float32: x + b), which is also written to the epilogue's y
// (in place).
void expect_casts_match_the_cpu(const std::vector<std::pair<int64_t, int64_t>>& shapes) {
  struct Case {
    int64_t rows, cols;
    bool straight, transposed, bias, relu, bf16;
    std::vector<float> x, b;
    DeviceBuffer<float> d_x, d_b;
    DeviceBuffer<uint16_t> d_out, d_out_t;
  };
  std::vector<Case> cases;
  for (int variant = 0; variant < 2; ++variant)
    for (size_t i = 0; i < shapes.size(); ++i) {
      Case c;
      c.rows = shapes[i].first;
      c.cols = shapes[i].second;
      const int k = static_cast<int>(i) + variant;
      c.straight = k % 3 != 1;
      c.transposed = k % 3 != 2;
      c.bias = variant == 1;
      c.relu = k % 2 == 0;
      c.bf16 = k % 4 < 2;
      c.x = variant == 0 ? testing::awkward_floats(c.rows * c.cols, static_cast<uint32_t>(i))
                         : testing::random_normal(c.rows * c.cols, static_cast<uint32_t>(i));
      c.b = testing::random_normal(c.cols, static_cast<uint32_t>(100 + i));
      c.d_x = DeviceBuffer<float>(c.x.size());
      c.d_x.upload(c.x);
      c.d_b = DeviceBuffer<float>(c.b.size());
      c.d_b.upload(c.b);
      c.d_out = DeviceBuffer<uint16_t>(c.x.size());
      c.d_out_t = DeviceBuffer<uint16_t>(c.x.size());
      cases.push_back(std::move(c));
    }
  std::vector<Bf16Cast> casts;
  for (Case& c : cases) {
    Bf16Cast cast{c.d_x.data(), c.rows, c.cols, c.straight ? c.d_out.data() : nullptr,
                  c.transposed ? c.d_out_t.data() : nullptr};
    if (c.bias) cast.epilogue = {c.d_b.data(), c.relu ? Activation::Relu : Activation::None, c.bf16, c.d_x.data()};
    casts.push_back(cast);
  }
  ASSERT_GT(casts.size(), 16u);
  float_to_bf16_transposed(casts, nullptr);
  for (Case& c : cases) {
    const std::string what = std::to_string(c.rows) + "x" + std::to_string(c.cols) + (c.bias ? " with bias" : "");
    std::vector<float> v = c.x;
    if (c.bias)
      for (int64_t i = 0; i < c.rows * c.cols; ++i) {
        const float b = c.b[i % c.cols];
        const float a = c.bf16 ? fp8kit::round_bf16(fp8kit::round_bf16(c.x[i]) + fp8kit::round_bf16(b)) : c.x[i] + b;
        v[i] = c.relu ? std::max(a, 0.0f) : a;
      }
    const std::vector<float> y = c.d_x.to_host();
    const std::vector<uint16_t> out = c.d_out.to_host(), out_t = c.d_out_t.to_host();
    int64_t bad = 0;
    for (int64_t r = 0; r < c.rows; ++r)
      for (int64_t col = 0; col < c.cols; ++col) {
        const int64_t i = r * c.cols + col;
        const uint16_t want = fp8kit::float_to_bf16(v[i]);
        bad += std::bit_cast<uint32_t>(y[i]) != std::bit_cast<uint32_t>(v[i]) && !(std::isnan(y[i]) && std::isnan(v[i]));
        if (c.straight) bad += out[i] != want;
        if (c.transposed) bad += out_t[col * c.rows + r] != want;
      }
    EXPECT_EQ(bad, 0) << what;
  }
}

// Shapes of which some are not multiples of 4: the 32 x 32 tiles.
TEST(CudaConvert, Bf16CastAndTransposeMatchTheCpu) {
  FP8KIT_REQUIRE_GPU();
  expect_casts_match_the_cpu({{6400, 32}, {32, 32}, {1, 1}, {33, 65}, {32, 1}, {1, 32}, {217, 256}, {5, 160}, {64, 31}});
}

// Rows and columns multiples of 4: the 64 x 64 tiles of 4-element accesses, partial tiles included.
TEST(CudaConvert, Bf16CastAndTransposeOnWideTilesMatchTheCpu) {
  FP8KIT_REQUIRE_GPU();
  expect_casts_match_the_cpu({{6400, 32}, {4, 4}, {64, 64}, {68, 132}, {256, 12}, {12, 256}, {200, 4}, {1024, 768}, {4, 1000}});
}

// A Linear's output gradient cast with the backward of its epilogue applied on the fly: the copies
// are float_to_bf16 of g = ReLU mask(ops::dropout_backward(dy)), as nn::Linear's backward.
TEST(CudaConvert, Bf16CastOfTheEpilogueGradient) {
  FP8KIT_REQUIRE_GPU();
  DeviceBuffer<uint64_t> d_step(1);
  d_step.upload(std::vector<uint64_t>{5});
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{6400, 32}, {32, 1}, {33, 65}, {132, 68}}) {
    const std::vector<float> dy = testing::random_normal(rows * cols, 1), y = testing::random_normal(rows * cols, 2);
    DeviceBuffer<float> d_dy(dy.size()), d_y(y.size());
    d_dy.upload(dy);
    d_y.upload(y);
    DeviceBuffer<uint16_t> d_out(dy.size()), d_out_t(dy.size());
    for (bool relu : {false, true})
      for (bool dropout : {false, true})
        for (bool bf16 : {false, true}) {
          std::vector<float> g = dy;
          if (dropout) ops::dropout_backward(ops::DropoutMask(2, 5, 3, 0.1f), 0.1f, bf16, dy, g);
          for (int64_t i = 0; i < rows * cols; ++i)
            if (relu && !(y[i] > 0.0f)) g[i] = 0.0f;
          Bf16Cast cast{d_dy.data(), rows, cols, d_out.data(), d_out_t.data()};
          cast.gradient = {(relu ? Activation::Relu : Activation::None), d_y.data(), {2, d_step.data(), 3, 0.1f, dropout}, bf16};
          float_to_bf16_transposed({&cast, 1});
          const std::vector<uint16_t> out = d_out.to_host(), out_t = d_out_t.to_host();
          int64_t bad = 0;
          for (int64_t r = 0; r < rows; ++r)
            for (int64_t c = 0; c < cols; ++c) {
              const uint16_t want = fp8kit::float_to_bf16(g[r * cols + c]);
              bad += (out[r * cols + c] != want) + (out_t[c * rows + r] != want);
            }
          EXPECT_EQ(bad, 0) << rows << "x" << cols << " relu " << relu << " dropout " << dropout << " bf16 " << bf16;
        }
  }
}

TEST(CudaConvert, BadArgumentsAreNamed) {
  FP8KIT_REQUIRE_GPU();
  EXPECT_THROW(float_to_bf16(nullptr, 4, nullptr), Error);
  EXPECT_THROW(bf16_to_float(nullptr, -1, nullptr), Error);
  DeviceBuffer<float> f(4);
  EXPECT_THROW(dequantize_fp8(reinterpret_cast<const uint8_t*>(f.data()), 4, Fp8Format::E4M3, nullptr, f.data()), Error);
  float_to_bf16(nullptr, 0, nullptr);  // empty is fine
  const Bf16Cast no_x{nullptr, 2, 2, nullptr, nullptr};
  EXPECT_THROW(float_to_bf16_transposed({&no_x, 1}), Error);
  const Bf16Cast negative{f.data(), -1, 2, nullptr, nullptr};
  EXPECT_THROW(float_to_bf16_transposed({&negative, 1}), Error);
  const Bf16Cast empty{nullptr, 0, 5, nullptr, nullptr};
  float_to_bf16_transposed({&empty, 1});
}

}  // namespace
}  // namespace fp8kit::cuda
