// The lab's MLP on the CPU: every gradient of a training step (deferred GELU, MSE, both Linears) by
// finite differences of its loss, training in bf16 and FP8 tracking fp32, and inference in bf16 and
// with E4M3 weights and activations against the fp32 forward.
#include "models/mlp.h"

#include "common/error_of.h"
#include "common/gradient_check.h"
#include "nn/linear.h"
#include "numerics/cast.h"
#include "ops/activation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace fp8kit::models {
namespace {

constexpr MlpConfig kSmall{.input = 16, .hidden = 48, .output = 8};

Tensor host(const std::vector<float>& v, int64_t rows, int64_t cols, DType dtype = DType::F32) {
  Tensor t({rows, cols}, dtype);
  for (size_t i = 0; i < v.size(); ++i) {
    if (dtype == DType::F32) t.data<float>()[i] = v[i];
    else t.data<uint16_t>()[i] = float_to_bf16(v[i]);
  }
  return t;
}

float loss_of(const Mlp& m) { return m.loss().data<float>()[0]; }

// The MLP in double from its fp32 weights: y = W2 gelu(W1 x + b1) + b2, weights [out, in].
std::vector<double> reference(Mlp& m, const std::vector<float>& x, int64_t rows) {
  const auto params = m.parameter_set().parameters();  // fc1.weight, fc1.bias, fc2.weight, fc2.bias
  const MlpConfig& c = m.config();
  std::vector<double> y(static_cast<size_t>(rows * c.output));
  std::vector<double> h(static_cast<size_t>(c.hidden));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < c.hidden; ++j) {
      double a = params[1]->value.data<float>()[j];
      for (int64_t i = 0; i < c.input; ++i) a += double(params[0]->value.data<float>()[j * c.input + i]) * x[r * c.input + i];
      h[j] = 0.5 * a * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (a + 0.044715 * a * a * a)));
    }
    for (int64_t o = 0; o < c.output; ++o) {
      double a = params[3]->value.data<float>()[o];
      for (int64_t j = 0; j < c.hidden; ++j) a += double(params[2]->value.data<float>()[o * c.hidden + j]) * h[j];
      y[r * c.output + o] = a;
    }
  }
  return y;
}

TEST(Mlp, Fp32StepGradientsMatchFiniteDifferences) {
  const int64_t rows = 5;
  optim::AdamOptions frozen = lab_adamw();
  frozen.learning_rate = 0.0f;  // the step leaves the weights as they are
  Mlp m(kSmall, 3, Device::Cpu, frozen);
  const std::vector<float> xv = testing::random_vector(rows * kSmall.input, 4, -2, 2),
                           tv = testing::random_vector(rows * kSmall.output, 5);
  m.train_step(host(xv, rows, kSmall.input), host(tv, rows, kSmall.output));
  // The MSE of the double-precision forward, as the finite differences' loss.
  auto loss = [&] {
    const std::vector<double> y = reference(m, xv, rows);
    double sum = 0;
    for (size_t i = 0; i < y.size(); ++i) sum += (y[i] - tv[i]) * (y[i] - tv[i]);
    return sum / static_cast<double>(y.size());
  };
  EXPECT_NEAR(loss_of(m), loss(), 1e-6 * loss());
  for (nn::Parameter* p : m.parameter_set().parameters()) {
    const std::vector<float> analytic(p->grad.span<float>().begin(), p->grad.span<float>().end());
    testing::expect_gradient_close(p->value.span<float>(), analytic, loss, 1e-3, 1e-6, 1e-3, p->name, 24);
  }
}

TEST(Mlp, Bf16AndFp8TrainingTrackFp32) {
  const int64_t rows = 32;
  const Tensor x = host(testing::random_vector(rows * kSmall.input, 6, -2, 2), rows, kSmall.input);
  const Tensor t = host(testing::random_vector(rows * kSmall.output, 7), rows, kSmall.output);
  optim::AdamOptions fast = lab_adamw();
  fast.learning_rate = 2e-3f;
  std::vector<float> final_loss;
  for (nn::Precision p : {nn::Precision::Fp32, nn::Precision::Bf16, nn::Precision::Fp8}) {
    Mlp m(kSmall, 8, Device::Cpu, fast);
    Fp8Recipe recipe;
    recipe.amax_history_length = 16;
    recipe.amax_algorithm = AmaxAlgorithm::MostRecent;
    m.set_precision(p, recipe);
    m.train_step(x, t);
    const float first = loss_of(m);
    for (int s = 0; s < 30; ++s) m.train_step(x, t);
    EXPECT_LT(loss_of(m), 0.8f * first) << name(p) << " " << first << " -> " << loss_of(m);
    final_loss.push_back(loss_of(m));
  }
  EXPECT_NEAR(final_loss[1], final_loss[0], 0.02 * final_loss[0]);
  EXPECT_NEAR(final_loss[2], final_loss[0], 0.05 * final_loss[0]);
}

TEST(Mlp, InferenceInBf16AndFp8MatchesTheFp32Forward) {
  const int64_t rows = 24;
  const std::vector<float> xv = [] {
    std::vector<float> v = testing::random_vector(rows * kSmall.input, 9, -2, 2);
    for (float& e : v) e = round_bf16(e);
    return v;
  }();
  const Tensor x = host(xv, rows, kSmall.input, DType::Bf16);
  double error[2];
  for (int k = 0; k < 2; ++k) {
    Mlp m(kSmall, 10, Device::Cpu);
    m.set_precision(k == 0 ? nn::Precision::Bf16 : nn::Precision::Fp8);
    m.prepare_inference(x);
    Tensor y;
    m.infer(x, y);
    ASSERT_EQ(y.shape(), (std::vector<int64_t>{rows, kSmall.output}));
    ASSERT_EQ(y.dtype(), DType::Bf16);
    const std::vector<double> want = reference(m, xv, rows);
    double diff = 0, norm = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      diff += std::abs(bf16_to_float(y.data<uint16_t>()[i]) - want[i]);
      norm += std::abs(want[i]);
    }
    error[k] = diff / norm;
    if (k == 1) {  // scales calibrated: E4M3 max / amax of the bf16 input and of the GELU's output
      float amax = 0;
      for (float v : xv) amax = std::max(amax, std::abs(v));
      EXPECT_FLOAT_EQ(m.input_scale(0), 448.0f / amax);
      EXPECT_GT(m.input_scale(1), 0.0f);
    }
  }
  EXPECT_LT(error[0], 0.01);
  EXPECT_LT(error[1], 0.05);
  EXPECT_GT(error[1], error[0]);
}

TEST(Mlp, ErrorsSayWhatToDo) {
  Mlp m(kSmall, 1, Device::Cpu);
  Tensor x({2, kSmall.input}, DType::Bf16), y;
  m.set_precision(nn::Precision::Bf16);
  EXPECT_THAT(testing::error_of([&] { m.infer(x, y); }), ::testing::HasSubstr("call prepare_inference before infer"));
  m.set_precision(nn::Precision::Fp32);
  EXPECT_THAT(testing::error_of([&] { m.prepare_inference(x); }),
              ::testing::HasSubstr("mlp inference runs in bf16 or fp8; set_precision first"));
}

}  // namespace
}  // namespace fp8kit::models
