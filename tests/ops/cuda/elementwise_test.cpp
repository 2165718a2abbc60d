// GPU element-wise kernels of the training step against plain loops and the CPU ops they fuse
// (the Linear op's bias/ReLU rules, ops::dropout_forward/backward, residual sums), and the bias
// gradient against the CPU Linear op's backward bit for bit (the GPU adds in its order).
#include "ops/cuda/elementwise.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "ops/linear.h"
#include "numerics/cast.h"
#include "ops/cuda/gpu_test.h"
#include "ops/dropout.h"
#include "runtime/cuda/device_buffer.h"

namespace fp8kit::cuda {
namespace {

constexpr ops::PieceOrder kOrder = ops::LinearOp::kBiasGradientOrder;

// The CPU model's ops one after the other (ops/cpu): the Linear op's bias + ReLU, dropout, residual add.
std::vector<float> cpu_linear_output(const std::vector<float>& y0, const std::vector<float>& bias, int64_t cols,
                                     bool relu, bool bf16, std::vector<float>& y) {
  y.resize(y0.size());
  for (size_t i = 0; i < y0.size(); ++i) {
    const float b = bias[i % cols];
    const float v = bf16 ? fp8kit::round_bf16(fp8kit::round_bf16(y0[i]) + fp8kit::round_bf16(b)) : y0[i] + b;
    y[i] = relu ? std::max(v, 0.0f) : v;
  }
  return y;
}

// linear_outputs against the separate CPU ops (bias + ReLU, ops::dropout_forward, the residual sum),
// bit for bit: y only, + dropout, + dropout + residual, an inactive site; several outputs of different
// shapes in one call (more than one launch's worth).
TEST(CudaElementwise, LinearOutputsAreBiasReluDropoutAndAdd) {
  FP8KIT_REQUIRE_GPU();
  constexpr uint64_t kSeed = 5, kStep = 17;
  constexpr float kRate = 0.1f;
  DeviceBuffer<uint64_t> d_step(1);
  d_step.upload(std::vector<uint64_t>{kStep});
  // 16-byte accesses ({6400, 32}, {3, 2052}: rows wider than a block's 1024 columns) and single ones.
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{6400, 32}, {32, 1}, {5, 33}, {1, 1},
                                                           {300, 7}, {3, 2052}, {4, 1030}};
  for (bool relu : {false, true})
    for (bool bf16 : {false, true})
      for (int mode = 0; mode < 4; ++mode) {  // y only; dropout; dropout + residual; inactive site + residual
        std::vector<LinearOutput> outputs;
        std::vector<DeviceBuffer<float>> buffers;
        std::vector<std::vector<float>> want_y, want_out;
        for (size_t t = 0; t < shapes.size(); ++t) {
          const auto [rows, cols] = shapes[t];
          const uint32_t seed = static_cast<uint32_t>(10 * t);
          const std::vector<float> y0 = testing::random_normal(rows * cols, seed + 1),
                                   bias = testing::random_normal(cols, seed + 2),
                                   residual = testing::random_normal(rows * cols, seed + 3);
          std::vector<float> y;
          cpu_linear_output(y0, bias, cols, relu, bf16, y);
          std::vector<float> out = y;
          const uint32_t site = static_cast<uint32_t>(t);
          if (mode == 1 || mode == 2)
            ops::dropout_forward(ops::DropoutMask(kSeed, kStep, site, kRate), kRate, bf16, y, out);
          if (mode >= 2)
            for (size_t i = 0; i < out.size(); ++i)
              out[i] = bf16 ? fp8kit::round_bf16(residual[i] + out[i]) : residual[i] + out[i];
          want_y.push_back(y);
          want_out.push_back(out);
          for (const auto* host : {&y0, &bias, &residual}) {
            buffers.emplace_back(host->size());
            buffers.back().upload(*host);
          }
          buffers.emplace_back(y0.size());
          DeviceBuffer<float>* b = &buffers[buffers.size() - 4];
          LinearOutput o{b[0].data(), b[1].data(), rows, cols, (relu ? Activation::Relu : Activation::None)};
          if (mode > 0) o.out = b[3].data();
          if (mode == 1 || mode == 2) o.dropout = {kSeed, d_step.data(), site, kRate, true};
          if (mode >= 2) o.residual = b[2].data();
          outputs.push_back(o);
        }
        linear_outputs(outputs, bf16, nullptr);
        for (size_t t = 0; t < shapes.size(); ++t) {
          const std::string what = std::to_string(shapes[t].first) + "x" + std::to_string(shapes[t].second) +
                                   " relu " + std::to_string(relu) + " bf16 " + std::to_string(bf16) + " mode " +
                                   std::to_string(mode);
          EXPECT_EQ(testing::max_ulp_difference(buffers[4 * t].to_host(), want_y[t]), 0) << what;
          if (mode > 0) {
            EXPECT_EQ(testing::max_ulp_difference(buffers[4 * t + 3].to_host(), want_out[t]), 0) << what;
          }
        }
      }
}

// The bf16 copy of act(y + bias) (a biased projection's SDPA operand), y left as it is: narrow rows
// several to a block, wide ones across blocks, 16-byte and single accesses.
TEST(CudaElementwise, LinearOutputsCopyIsTheBf16OfTheOutput) {
  FP8KIT_REQUIRE_GPU();
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{6400, 32}, {5, 33}, {3, 2052}, {4, 1030}})
    for (bool relu : {false, true}) {
      const std::vector<float> y0 = testing::random_normal(rows * cols, 7), bias = testing::random_normal(cols, 8);
      std::vector<float> want;
      cpu_linear_output(y0, bias, cols, relu, true, want);
      DeviceBuffer<float> d_y(y0.size()), d_bias(bias.size());
      DeviceBuffer<uint16_t> d_copy(y0.size());
      d_y.upload(y0);
      d_bias.upload(bias);
      LinearOutput o{d_y.data(), d_bias.data(), rows, cols, (relu ? Activation::Relu : Activation::None)};
      o.copy = d_copy.data();
      o.write_y = false;
      linear_outputs({&o, 1}, true, nullptr);
      const std::vector<uint16_t> copy = d_copy.to_host();
      size_t wrong = 0;
      for (size_t i = 0; i < want.size(); ++i) wrong += copy[i] != fp8kit::float_to_bf16(want[i]);
      EXPECT_EQ(wrong, 0u) << rows << "x" << cols << " relu " << relu;
      EXPECT_EQ(testing::max_ulp_difference(d_y.to_host(), y0), 0) << "y must be left as it was";
    }
}

// The ReLU mask and the dropout backward folded into the bias gradient's pass: g against
// ops::dropout_backward and the mask, bit for bit; the bias gradient in float32 (its exact order is
// the next test's).
TEST(CudaElementwise, BiasBackwardMasksReluAndDropout) {
  FP8KIT_REQUIRE_GPU();
  constexpr uint64_t kSeed = 8, kStep = 3;
  constexpr uint32_t kSite = 4;
  constexpr float kRate = 0.1f;
  DeviceBuffer<uint64_t> d_step(1);
  d_step.upload(std::vector<uint64_t>{kStep});
  // {8195, 4001}: a thread per piece and column (the large gradients' kernel).
  for (const auto& [rows, cols] :
       std::vector<std::pair<int64_t, int64_t>>{{6400, 32}, {32, 1}, {5, 33}, {8195, 4001}}) {
    const std::vector<float> y = testing::random_normal(rows * cols, 1), dy = testing::random_normal(rows * cols, 3);
    DeviceBuffer<float> d_y(y.size()), d_dy(dy.size()), d_g(dy.size()), d_db(cols),
        workspace(bias_backward_workspace(rows, cols, kOrder));
    d_y.upload(y);
    d_dy.upload(dy);
    for (bool relu : {false, true})
      for (bool dropout : {false, true})
        for (bool bf16 : {false, true}) {
          std::vector<float> g = dy, db(cols, 0.0f);
          if (dropout) ops::dropout_backward(ops::DropoutMask(kSeed, kStep, kSite, kRate), kRate, bf16, dy, g);
          for (int64_t i = 0; i < rows * cols; ++i) {
            if (relu && !(y[i] > 0.0f)) g[i] = 0.0f;
            db[i % cols] += g[i];
          }
          const BiasBackward t{d_dy.data(), {(relu ? Activation::Relu : Activation::None), d_y.data(), {kSeed, d_step.data(), kSite, kRate, dropout}, bf16},
                               d_g.data(), d_db.data()};
          bias_backward({&t, 1}, rows, cols, kOrder, workspace.data(), nullptr);
          EXPECT_EQ(testing::max_ulp_difference(d_g.to_host(), g), 0)
              << rows << "x" << cols << " relu " << relu << " dropout " << dropout << " bf16 " << bf16;
          EXPECT_LT(testing::relative_l2(d_db.to_host(), db), 1e-5);
        }
  }
}

// The CPU Linear op's bias gradient (its order), from its own forward output y; twice, for the same
// bits; in place (g aliasing dy).
TEST(CudaElementwise, BiasGradientIsTheCpuLayersBitForBit) {
  FP8KIT_REQUIRE_GPU();
  constexpr int64_t kIn = 3;
  for (const auto& [rows, cols] :
       std::vector<std::pair<int64_t, int64_t>>{{6400, 32}, {32, 1}, {5, 33}, {1537, 70}, {512, 32}, {513, 32},
                                                {8195, 4001}, {300, 70000}}) {
    for (bool relu : {false, true}) {
      auto host = [](const std::vector<float>& v, std::vector<int64_t> shape) {
        Tensor t(std::move(shape), DType::F32);
        std::copy(v.begin(), v.end(), t.data<float>());
        return t;
      };
      Tensor w = host(testing::random_normal(kIn * cols, 1), {kIn * cols}), b = host(testing::random_normal(cols, 2), {cols});
      Tensor dw({kIn * cols}, DType::F32), bias_grad({cols}, DType::F32);
      ops::LinearOp layer;
      layer.in = kIn;
      layer.out = cols;
      layer.activation = (relu ? Activation::Relu : Activation::None);
      layer.w = &w, layer.b = &b, layer.dw = &dw, layer.db = &bias_grad;
      const std::vector<float> x = testing::random_normal(rows * kIn, 3), dy = testing::random_normal(rows * cols, 4);
      const Tensor xt = host(x, {rows, kIn}), dyt = host(dy, {rows, cols});
      ops::Context cpu;
      ops::linear_forward(cpu, layer, xt, true);
      const std::vector<float> y(layer.y.data<float>(), layer.y.data<float>() + layer.y.numel());
      DeviceBuffer<float> d_y(y.size()), d_dy(dy.size()), d_db(cols),
          workspace(bias_backward_workspace(rows, cols, kOrder));
      d_y.upload(y);
      const ops::LinearGradient gradient{&layer, &dyt};
      ops::linear_backward(cpu, {&gradient, 1});
      const std::vector<float> want(bias_grad.data<float>(), bias_grad.data<float>() + cols);
      std::vector<float> first;
      for (int run = 0; run < 2; ++run) {
        d_dy.upload(dy);
        d_db.fill_bytes(0x7F);
        const BiasBackward t{d_dy.data(), {(relu ? Activation::Relu : Activation::None), d_y.data()}, d_dy.data(), d_db.data()};
        bias_backward({&t, 1}, rows, cols, kOrder, workspace.data(), nullptr);
        const std::vector<float> db = d_db.to_host();
        EXPECT_EQ(testing::max_ulp_difference(db, want), 0) << rows << "x" << cols << " relu " << relu;
        if (run == 0) {
          first = db;
        } else {
          EXPECT_EQ(std::memcmp(db.data(), first.data(), db.size() * sizeof(float)), 0) << "two runs differ";
        }
      }
    }
  }
}

// The op sums in the order it is given, not one of its own: pieces of 3 rows, added in piece order,
// bit for bit; a non-positive piece size is refused.
TEST(CudaElementwise, BiasBackwardSumsInTheGivenPieceOrder) {
  FP8KIT_REQUIRE_GPU();
  constexpr int64_t kRows = 10, kCols = 5;
  constexpr ops::PieceOrder kThrees{3};
  const std::vector<float> dy = testing::random_normal(kRows * kCols, 5);
  std::vector<float> expected(kCols);
  for (int64_t c = 0; c < kCols; ++c) {
    float total = 0.0f;
    for (int64_t p = 0; p < kThrees.pieces(kRows); ++p) {
      float piece = 0.0f;
      for (int64_t r = p * 3; r < std::min(kRows, (p + 1) * 3); ++r) piece += dy[r * kCols + c];
      total += piece;
    }
    expected[c] = total;
  }
  DeviceBuffer<float> d_dy(dy.size()), d_db(kCols), workspace(bias_backward_workspace(kRows, kCols, kThrees));
  d_dy.upload(dy);
  const BiasBackward t{d_dy.data(), {}, nullptr, d_db.data()};
  bias_backward({&t, 1}, kRows, kCols, kThrees, workspace.data(), nullptr);
  EXPECT_EQ(testing::max_ulp_difference(d_db.to_host(), expected), 0);
  EXPECT_THROW(bias_backward({&t, 1}, kRows, kCols, ops::PieceOrder{0}, workspace.data(), nullptr), Error);
  EXPECT_THROW(bias_backward_workspace(kRows, kCols, ops::PieceOrder{-1}), Error);
}

// Three Linears of one shape in one call (query, key, value): each one's g and bias gradient are
// those of its own call, bit for bit (one piece and several; at {1030, 11000} the three take the large
// gradients' kernel, each alone the other).
TEST(CudaElementwise, BiasBackwardOfSeveralLinearsIsEachOnesOwn) {
  FP8KIT_REQUIRE_GPU();
  DeviceBuffer<uint64_t> d_step(1);
  d_step.upload(std::vector<uint64_t>{4});
  for (const auto& [rows, cols] :
       std::vector<std::pair<int64_t, int64_t>>{{6400, 32}, {32, 1}, {513, 33}, {1030, 11000}}) {
    std::vector<DeviceBuffer<float>> dy, y, g, db;
    std::vector<BiasBackward> tensors;
    for (int t = 0; t < 3; ++t) {
      for (auto* list : {&dy, &y, &g}) list->emplace_back(rows * cols);
      db.emplace_back(cols);
      dy.back().upload(testing::random_normal(rows * cols, 30 + t));
      y.back().upload(testing::random_normal(rows * cols, 40 + t));
      tensors.push_back({dy.back().data(),
                         {t == 2 ? Activation::Relu : Activation::None, y.back().data(), {7, d_step.data(), static_cast<uint32_t>(t), 0.1f, t != 1}, true},
                         g.back().data(), db.back().data()});
    }
    DeviceBuffer<float> workspace(bias_backward_workspace(rows, cols, kOrder, 3));
    bias_backward(tensors, rows, cols, kOrder, workspace.data(), nullptr);
    for (int t = 0; t < 3; ++t) {
      const std::vector<float> g_batched = g[t].to_host(), db_batched = db[t].to_host();
      bias_backward({&tensors[t], 1}, rows, cols, kOrder, workspace.data(), nullptr);
      EXPECT_EQ(testing::max_ulp_difference(g_batched, g[t].to_host()), 0) << rows << "x" << cols << " tensor " << t;
      EXPECT_EQ(testing::max_ulp_difference(db_batched, db[t].to_host()), 0) << rows << "x" << cols << " tensor " << t;
      // Without writing g (the model's side branch recomputes it): the same bias gradient.
      BiasBackward no_g = tensors[t];
      no_g.g = nullptr;
      db[t].fill_bytes(0x7F);
      bias_backward({&no_g, 1}, rows, cols, kOrder, workspace.data(), nullptr);
      EXPECT_EQ(testing::max_ulp_difference(db_batched, db[t].to_host()), 0) << rows << "x" << cols << " no g " << t;
    }
  }
}

// Many shapes in one call (more than one launch's 16 matrices).
TEST(CudaElementwise, Transpose) {
  FP8KIT_REQUIRE_GPU();
  const std::vector<std::pair<int64_t, int64_t>> shapes = {{6400, 32}, {1, 1}, {33, 65}, {32, 1}, {1, 32}, {0, 5}};
  std::vector<std::vector<float>> xs;
  std::vector<DeviceBuffer<float>> d_x, d_t;
  std::vector<Transpose> matrices;
  for (int copy = 0; copy < 3; ++copy)
    for (const auto& [rows, cols] : shapes) {
      xs.push_back(testing::random_normal(rows * cols, static_cast<uint32_t>(xs.size())));
      d_x.emplace_back(std::max<int64_t>(1, rows * cols));
      d_t.emplace_back(std::max<int64_t>(1, rows * cols));
      if (rows * cols > 0) d_x.back().upload(xs.back());
      matrices.push_back({d_x.back().data(), rows, cols, d_t.back().data()});
    }
  ASSERT_GT(matrices.size(), 16u);
  transpose(matrices, nullptr);
  for (size_t m = 0; m < matrices.size(); ++m) {
    const int64_t rows = matrices[m].rows, cols = matrices[m].cols;
    const std::vector<float> t = d_t[m].to_host();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) ASSERT_EQ(t[c * rows + r], xs[m][r * cols + c]) << rows << "x" << cols;
  }
}

// residual_gradient against the CPU model's steps: the sums in float32 in the stated order, then
// ops::dropout_backward (or none).
TEST(CudaElementwise, ResidualGradientIsTheSumsThenDropoutBackward) {
  FP8KIT_REQUIRE_GPU();
  DeviceBuffer<uint64_t> d_step(1);
  d_step.upload(std::vector<uint64_t>{2});
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{204800}}) {
    std::vector<std::vector<float>> terms;
    std::vector<DeviceBuffer<float>> d_terms;
    for (uint32_t t = 0; t < 4; ++t) {
      terms.push_back(testing::random_normal(n, 20 + t));
      d_terms.emplace_back(n);
      d_terms.back().upload(terms.back());
    }
    DeviceBuffer<float> d_out(n);
    for (bool dropout : {false, true})
      for (bool bf16 : {false, true}) {
        std::vector<float> want(n);
        for (int64_t i = 0; i < n; ++i) want[i] = terms[0][i] + ((terms[1][i] + terms[2][i]) + terms[3][i]);
        if (dropout) ops::dropout_backward(ops::DropoutMask(1, 2, 0, 0.1f), 0.1f, bf16, want, want);
        residual_gradient(d_terms[0].data(), d_terms[1].data(), d_terms[2].data(), d_terms[3].data(),
                          DropoutSite{1, d_step.data(), 0, 0.1f, dropout}, bf16, d_out.data(), n, nullptr);
        EXPECT_EQ(testing::max_ulp_difference(d_out.to_host(), want), 0)
            << "n " << n << " dropout " << dropout << " bf16 " << bf16;
      }
  }
}

TEST(CudaElementwise, SpreadAndClear) {
  FP8KIT_REQUIRE_GPU();
  const std::vector<float> x = testing::random_normal(24, 9);
  DeviceBuffer<float> d_x(24), d_out(4 * 24), d_zero(24);
  d_x.upload(x);
  d_out.fill_bytes(0);
  d_zero.upload(testing::random_normal(24, 10));
  spread(d_x.data(), 24, 4, d_out.data(), nullptr, d_zero.data());
  const std::vector<float> out = d_out.to_host();
  for (int i = 0; i < 24; ++i) EXPECT_EQ(out[4 * i], x[i]);
  EXPECT_EQ(d_zero.to_host(), std::vector<float>(24, 0.0f));
  spread(d_x.data(), 24, 4, d_out.data(), nullptr);  // without clearing
}

}  // namespace
}  // namespace fp8kit::cuda
