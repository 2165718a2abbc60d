// Bias gradients summed by the gradient casts (BiasSum in quantize_fp8 and float_to_bf16_transposed):
// bias_backward's bits, in its order, whichever way the cast takes them (in its own tiles at large
// shapes, by bias_backward after it otherwise), and the cast's own outputs unchanged.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "numerics/cast.h"
#include "ops/cuda/convert.h"
#include "ops/cuda/elementwise.h"
#include "ops/cuda/gpu_test.h"
#include "ops/cuda/quantize.h"
#include "ops/linear.h"
#include "runtime/cuda/device_buffer.h"

namespace fp8kit::cuda {
namespace {

constexpr ops::PieceOrder kOrder = ops::LinearOp::kBiasGradientOrder;

// One gradient to cast: dy, the activation's y (GELU's input, ReLU's output) and the gradient's form.
struct Case {
  int64_t rows, cols;
  DeviceBuffer<float> dy, y;
  EpilogueGradient gradient;
};

// The gradient forms: none, GELU's backward, ReLU's with the dropout's (mixed bf16's mask).
std::vector<EpilogueGradient> gradients(const float* y, const uint64_t* step) {
  return {{}, {Activation::Gelu, y, {}, true}, {Activation::Relu, y, {3, step, 2, 0.1f, true}, true}};
}

// bias_backward's bias gradient of c.
std::vector<float> reference(const Case& c) {
  DeviceBuffer<float> db(c.cols), workspace(bias_backward_workspace(c.rows, c.cols, kOrder));
  const BiasBackward b{c.dy.data(), c.gradient, nullptr, db.data()};
  bias_backward({&b, 1}, c.rows, c.cols, kOrder, workspace.data(), nullptr);
  return db.to_host();
}

// At and beside cast_sums_bias's threshold: several pieces with a part-tile and a part-piece at the
// end ({1100, 1024}), one piece ({512, 2048}), columns past the last whole tile ({2048, 520}),
// rows and columns not multiples of 4 (the bf16 cast's small tile: bias_backward after it), and a
// small gradient (bias_backward after either cast).
const std::vector<std::pair<int64_t, int64_t>> kShapes = {{1100, 1024}, {512, 2048}, {2048, 520}, {1030, 1023}, {96, 40}};

std::vector<Case> cases_of(int64_t rows, int64_t cols, const uint64_t* step, int seed) {
  std::vector<Case> cases;
  for (const EpilogueGradient& g : gradients(nullptr, step)) {
    Case c{rows, cols, DeviceBuffer<float>(rows * cols), DeviceBuffer<float>(rows * cols), g};
    c.dy.upload(testing::random_normal(rows * cols, seed++));
    c.y.upload(testing::random_normal(rows * cols, seed++));
    if (c.gradient.activation != Activation::None) c.gradient.y = c.y.data();
    cases.push_back(std::move(c));
  }
  return cases;
}

std::string name(const Case& c) {
  return std::to_string(c.rows) + "x" + std::to_string(c.cols) + " activation " +
         std::to_string(static_cast<int>(c.gradient.activation)) + " dropout " + std::to_string(c.gradient.dropout.active);
}

TEST(CudaBiasSum, Fp8CastsSumBiasBackwardsBitsAndCastTheSame) {
  FP8KIT_REQUIRE_GPU();
  DeviceBuffer<uint64_t> step(1);
  step.upload(std::vector<uint64_t>{5});
  DeviceBuffer<float> scale(1);
  scale.upload(std::vector<float>{64.0f});
  for (const auto& [rows, cols] : kShapes) {
    std::vector<Case> cases = cases_of(rows, cols, step.data(), 10);
    // Each alone, then the three in one batch (with its all-or-none rule, and with the first not
    // summing: bias_backward for the other two).
    struct Out {
      DeviceBuffer<uint8_t> q, q_t;
      DeviceBuffer<float> amax, db, workspace;
    };
    std::vector<Out> plain, summed;
    std::vector<QuantizeArgs> plain_args, summed_args;
    for (const Case& c : cases) {
      for (auto* outs : {&plain, &summed})
        outs->push_back({DeviceBuffer<uint8_t>(rows * cols), DeviceBuffer<uint8_t>(rows * cols), DeviceBuffer<float>(1),
                         DeviceBuffer<float>(cols), DeviceBuffer<float>(bias_backward_workspace(rows, cols, kOrder))});
      for (auto* o : {&plain.back(), &summed.back()}) o->amax.fill_bytes(0);
      QuantizeArgs a{c.dy.data(), DType::F32, rows, cols, Fp8Format::E5M2, scale.data()};
      a.gradient = c.gradient;
      a.q = plain.back().q.data(), a.q_t = plain.back().q_t.data(), a.amax = plain.back().amax.data();
      plain_args.push_back(a);
      a.q = summed.back().q.data(), a.q_t = summed.back().q_t.data(), a.amax = summed.back().amax.data();
      a.bias_sum = {summed.back().db.data(), kOrder, summed.back().workspace.data()};
      summed_args.push_back(a);
    }
    for (size_t t = 0; t < cases.size(); ++t) {
      quantize_fp8(plain_args[t]);
      quantize_fp8(summed_args[t]);
      const std::string what = name(cases[t]);
      EXPECT_EQ(testing::max_ulp_difference(summed[t].db.to_host(), reference(cases[t])), 0) << what;
      EXPECT_EQ(summed[t].q.to_host(), plain[t].q.to_host()) << what;
      EXPECT_EQ(summed[t].q_t.to_host(), plain[t].q_t.to_host()) << what;
      EXPECT_EQ(summed[t].amax.to_host(), plain[t].amax.to_host()) << what;
    }
    for (bool all : {true, false}) {
      std::vector<QuantizeArgs> batch = summed_args;
      if (!all) batch[0].bias_sum = {};
      for (Out& o : summed) o.db.fill_bytes(0x7F);
      quantize_fp8_batch(batch);
      for (size_t t = all ? 0 : 1; t < cases.size(); ++t)
        EXPECT_EQ(testing::max_ulp_difference(summed[t].db.to_host(), reference(cases[t])), 0)
            << name(cases[t]) << " batched, all summing " << all;
      EXPECT_EQ(summed.back().q_t.to_host(), plain.back().q_t.to_host()) << "batched " << rows << "x" << cols;
    }
  }
}

TEST(CudaBiasSum, Bf16CastsSumBiasBackwardsBitsAndCastTheSame) {
  FP8KIT_REQUIRE_GPU();
  DeviceBuffer<uint64_t> step(1);
  step.upload(std::vector<uint64_t>{6});
  for (const auto& [rows, cols] : kShapes) {
    std::vector<Case> cases = cases_of(rows, cols, step.data(), 20);
    std::vector<DeviceBuffer<uint16_t>> out, out_t;
    std::vector<DeviceBuffer<float>> db, workspace;
    std::vector<Bf16Cast> casts;
    for (const Case& c : cases) {
      out.emplace_back(rows * cols), out_t.emplace_back(rows * cols);
      db.emplace_back(cols), workspace.emplace_back(bias_backward_workspace(rows, cols, kOrder));
      Bf16Cast cast{c.dy.data(), rows, cols, out.back().data(), out_t.back().data()};
      cast.gradient = c.gradient;
      cast.bias_sum = {db.back().data(), kOrder, workspace.back().data()};
      casts.push_back(cast);
    }
    for (bool all : {true, false}) {
      std::vector<Bf16Cast> batch = casts;
      if (!all) batch[0].bias_sum = {};
      for (DeviceBuffer<float>& d : db) d.fill_bytes(0x7F);
      float_to_bf16_transposed(batch);
      for (size_t t = all ? 0 : 1; t < cases.size(); ++t)
        EXPECT_EQ(testing::max_ulp_difference(db[t].to_host(), reference(cases[t])), 0)
            << name(cases[t]) << " all summing " << all;
      // The copies are those of the cast without the sums.
      for (size_t t = 0; t < cases.size(); ++t) {
        const std::vector<uint16_t> got = out[t].to_host(), got_t = out_t[t].to_host();
        Bf16Cast alone = casts[t];
        alone.bias_sum = {};
        float_to_bf16_transposed({&alone, 1});
        EXPECT_EQ(got, out[t].to_host()) << name(cases[t]);
        EXPECT_EQ(got_t, out_t[t].to_host()) << name(cases[t]);
      }
    }
  }
}

// GELU's backward with its input formed from y = x W and the bias (EpilogueGradient::bias, the GPU
// Linear's pre_in_y) gives the bits of the same backward reading that input stored (pre = bf16(bf16(x
// W) + bf16(b)), mixed bf16's epilogue; x W + b in float32): the bf16 and FP8 casts, their bias sums,
// and bias_backward.
TEST(CudaBiasSum, GeluInputFromXwAndTheBiasIsTheStoredOnes) {
  FP8KIT_REQUIRE_GPU();
  constexpr int64_t kRows = 1100, kCols = 1024;  // the casts' own sums; 2 x 40: bias_backward's
  for (const auto& [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{kRows, kCols}, {2, 40}})
    for (bool bf16 : {true, false}) {
      const std::vector<float> xw = testing::random_normal(rows * cols, 51), dy = testing::random_normal(rows * cols, 52),
                               b = testing::random_normal(cols, 53);
      std::vector<float> pre(xw.size());
      for (int64_t i = 0; i < rows * cols; ++i) {
        const float bias = b[i % cols];
        pre[i] = bf16 ? round_bf16(round_bf16(xw[i]) + round_bf16(bias)) : xw[i] + bias;
      }
      DeviceBuffer<float> d_xw(xw.size()), d_pre(pre.size()), d_dy(dy.size()), d_b(cols), scale(1);
      d_xw.upload(xw), d_pre.upload(pre), d_dy.upload(dy), d_b.upload(b);
      scale.upload(std::vector<float>{16.0f});
      const EpilogueGradient stored{Activation::Gelu, d_pre.data(), {}, bf16};
      EpilogueGradient formed{Activation::Gelu, d_xw.data(), {}, bf16};
      formed.bias = d_b.data();
      const std::string what = std::to_string(rows) + "x" + std::to_string(cols) + " bf16 " + std::to_string(bf16);
      std::vector<std::vector<uint8_t>> codes;
      std::vector<std::vector<uint16_t>> copies;
      std::vector<std::vector<float>> sums;
      for (const EpilogueGradient& g : {stored, formed}) {
        DeviceBuffer<uint8_t> q(rows * cols);
        DeviceBuffer<uint16_t> out(rows * cols);
        DeviceBuffer<float> fp8_db(cols), bf16_db(cols), db(cols), workspace(bias_backward_workspace(rows, cols, kOrder));
        QuantizeArgs a{d_dy.data(), DType::F32, rows, cols, Fp8Format::E5M2, scale.data()};
        a.q_t = q.data();
        a.gradient = g;
        a.bias_sum = {fp8_db.data(), kOrder, workspace.data()};
        quantize_fp8(a);
        Bf16Cast cast{d_dy.data(), rows, cols, out.data()};
        cast.gradient = g;
        cast.bias_sum = {bf16_db.data(), kOrder, workspace.data()};
        float_to_bf16_transposed({&cast, 1});
        const BiasBackward pass{d_dy.data(), g, nullptr, db.data()};
        bias_backward({&pass, 1}, rows, cols, kOrder, workspace.data(), nullptr);
        codes.push_back(q.to_host());
        copies.push_back(out.to_host());
        for (auto* d : {&fp8_db, &bf16_db, &db}) sums.push_back(d->to_host());
      }
      EXPECT_EQ(codes[0], codes[1]) << what;
      EXPECT_EQ(copies[0], copies[1]) << what;
      for (int k = 0; k < 3; ++k) EXPECT_EQ(testing::max_ulp_difference(sums[k], sums[k + 3]), 0) << what << " sum " << k;
    }
}

TEST(CudaBiasSum, BadBiasSumsAreNamed) {
  FP8KIT_REQUIRE_GPU();
  DeviceBuffer<float> dy(64 * 64), db(64), scale(1);
  scale.upload(std::vector<float>{1.0f});
  DeviceBuffer<uint8_t> q(64 * 64);
  QuantizeArgs a{dy.data(), DType::F32, 64, 64, Fp8Format::E5M2, scale.data()};
  a.q = q.data();
  a.bias_sum = {db.data(), kOrder, nullptr};  // no workspace
  EXPECT_THROW(quantize_fp8(a), Error);
  DeviceBuffer<uint16_t> out(64 * 64);
  Bf16Cast cast{dy.data(), 64, 64, out.data()};
  cast.bias_sum = {db.data(), kOrder, nullptr};
  EXPECT_THROW(float_to_bf16_transposed({&cast, 1}), Error);
  // A gradient's bias forms GELU's input; with another activation it is refused.
  DeviceBuffer<float> workspace(bias_backward_workspace(64, 64, kOrder));
  cast.bias_sum = {};
  cast.gradient = {Activation::Relu, dy.data()};
  cast.gradient.bias = db.data();
  EXPECT_THROW(float_to_bf16_transposed({&cast, 1}), Error);
}

}  // namespace
}  // namespace fp8kit::cuda
