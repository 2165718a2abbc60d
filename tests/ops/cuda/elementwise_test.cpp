// GPU element-wise kernels of the training step against plain loops (nn::Linear's bias/ReLU rules),
// and the bias gradient against nn::Linear::backward bit for bit (the GPU adds in its order).
#include "ops/cuda/elementwise.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "nn/linear.h"
#include "numerics/cast.h"
#include "ops/cuda/device_buffer.h"
#include "ops/cuda/gpu_test.h"

namespace fp8kit::cuda {
namespace {

TEST(CudaElementwise, BiasActivationAndBackward) {
  FP8KIT_REQUIRE_GPU();
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{6400, 32}, {32, 1}, {5, 33}}) {
    const std::vector<float> y0 = testing::random_normal(rows * cols, 1), bias = testing::random_normal(cols, 2),
                             dy = testing::random_normal(rows * cols, 3);
    DeviceBuffer<float> d_y(y0.size()), d_bias(cols), d_dy(dy.size()), d_g(dy.size()), d_db(cols),
        workspace(bias_backward_workspace(rows, cols));
    d_bias.upload(bias);
    d_dy.upload(dy);
    for (bool relu : {false, true})
      for (bool bf16 : {false, true}) {
        d_y.upload(y0);
        bias_activation(d_y.data(), d_bias.data(), rows, cols, relu, bf16, nullptr);
        std::vector<float> want(y0.size());
        for (int64_t i = 0; i < rows * cols; ++i) {
          const float b = bias[i % cols];
          const float v = bf16 ? fp8kit::round_bf16(fp8kit::round_bf16(y0[i]) + fp8kit::round_bf16(b)) : y0[i] + b;
          want[i] = relu ? std::max(v, 0.0f) : v;
        }
        const std::vector<float> y = d_y.to_host();
        EXPECT_EQ(testing::max_ulp_difference(y, want), 0);
        bias_backward(d_dy.data(), d_y.data(), rows, cols, relu, d_g.data(), d_db.data(), workspace.data(), nullptr);
        std::vector<float> g(dy.size()), db(cols, 0.0f);
        for (int64_t i = 0; i < rows * cols; ++i) {
          g[i] = relu && !(y[i] > 0.0f) ? 0.0f : dy[i];
          db[i % cols] += g[i];
        }
        EXPECT_EQ(testing::max_ulp_difference(d_g.to_host(), g), 0);
        EXPECT_LT(testing::relative_l2(d_db.to_host(), db), 1e-5);
      }
  }
}

// nn::Linear::backward's bias gradient (the CPU's order), from its own forward output y; twice, for
// the same bits; in place (g aliasing dy) as the seed model calls it.
TEST(CudaElementwise, BiasGradientIsTheCpuLayersBitForBit) {
  FP8KIT_REQUIRE_GPU();
  constexpr int64_t kIn = 3;
  for (const auto& [rows, cols] :
       std::vector<std::pair<int64_t, int64_t>>{{6400, 32}, {32, 1}, {5, 33}, {1537, 70}, {512, 32}, {513, 32}}) {
    for (bool relu : {false, true}) {
      nn::Linear layer("d", kIn, cols, {kIn, cols}, {cols}, relu ? nn::Activation::Relu : nn::Activation::None);
      layer.kernel.value = testing::random_normal(kIn * cols, 1);
      layer.bias.value = testing::random_normal(cols, 2);
      const std::vector<float> x = testing::random_normal(rows * kIn, 3), dy = testing::random_normal(rows * cols, 4);
      const auto y = layer.forward(x, rows, true);
      DeviceBuffer<float> d_y(y.size()), d_dy(dy.size()), d_db(cols), workspace(bias_backward_workspace(rows, cols));
      d_y.upload(y);
      layer.backward(dy);
      std::vector<float> first;
      for (int run = 0; run < 2; ++run) {
        d_dy.upload(dy);
        d_db.fill_bytes(0x7F);
        bias_backward(d_dy.data(), d_y.data(), rows, cols, relu, d_dy.data(), d_db.data(), workspace.data(), nullptr);
        const std::vector<float> db = d_db.to_host();
        EXPECT_EQ(testing::max_ulp_difference(db, layer.bias.grad), 0) << rows << "x" << cols << " relu " << relu;
        if (run == 0) {
          first = db;
        } else {
          EXPECT_EQ(std::memcmp(db.data(), first.data(), db.size() * sizeof(float)), 0) << "two runs differ";
        }
      }
    }
  }
}

TEST(CudaElementwise, TransposeAndAdd) {
  FP8KIT_REQUIRE_GPU();
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{6400, 32}, {1, 1}, {33, 65}, {32, 1}}) {
    const std::vector<float> x = testing::random_normal(rows * cols, 4);
    DeviceBuffer<float> d_x(x.size()), d_t(x.size()), d_sum(x.size());
    DeviceBuffer<uint16_t> d_tb(x.size());
    d_x.upload(x);
    transpose(d_x.data(), rows, cols, DType::F32, d_t.data(), nullptr);
    transpose(d_x.data(), rows, cols, DType::Bf16, d_tb.data(), nullptr);
    const std::vector<float> t = d_t.to_host();
    const std::vector<uint16_t> tb = d_tb.to_host();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) {
        ASSERT_EQ(t[c * rows + r], x[r * cols + c]);
        ASSERT_EQ(tb[c * rows + r], fp8kit::float_to_bf16(x[r * cols + c]));
      }
    add(d_x.data(), d_t.data(), true, d_sum.data(), rows * cols, nullptr);
    add3(d_x.data(), d_t.data(), d_sum.data(), d_sum.data(), rows * cols, nullptr);
    const std::vector<float> sum = d_sum.to_host();
    for (int64_t i = 0; i < rows * cols; ++i) ASSERT_EQ(sum[i], x[i] + t[i] + fp8kit::round_bf16(x[i] + t[i]));
  }
}

}  // namespace
}  // namespace fp8kit::cuda
