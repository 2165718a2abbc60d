// Adam against Keras 3's update written out by hand in double for a few steps, and its state views.
#include "optim/adam.h"

#include <gtest/gtest.h>

#include <cmath>

namespace fp8kit::optim {
namespace {

std::vector<float> values(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

TEST(Adam, WeightDecaySkipsParametersMarkedSo) {
  nn::ParameterSet parameters;
  nn::Parameter& norm = parameters.add("norm", {4}, 1.0f, /*decayed=*/false);
  nn::Parameter& w = parameters.add("w", {4}, 1.0f);
  parameters.allocate(Device::Cpu);
  AdamOptions o;
  o.learning_rate = 0.1f;
  o.weight_decay = 0.5f;
  Adam adam(parameters, o);
  ops::Context c;
  adam.step(c);  // zero gradients: only the decay moves a weight
  for (float v : norm.value.span<float>()) EXPECT_EQ(v, 1.0f);
  for (float v : w.value.span<float>()) EXPECT_EQ(v, std::fma(-0.1f, 0.5f, 1.0f));
}

TEST(Adam, MatchesKerasUpdate) {
  nn::ParameterSet parameters;
  nn::Parameter& p = parameters.add("w", {3});
  parameters.add("b", {2});  // a second parameter, at an aligned offset of the flat buffers
  parameters.allocate(Device::Cpu);
  const float w0[] = {0.5f, -1.0f, 2.0f};
  std::copy(std::begin(w0), std::end(w0), p.value.data<float>());
  ops::Context c;
  Adam adam(parameters);
  double w[3] = {0.5, -1.0, 2.0}, m[3] = {}, v[3] = {};
  const float grads[4][3] = {{0.1f, -0.2f, 0.0f}, {0.3f, 0.1f, -1e-4f}, {-0.5f, 0.0f, 2.0f}, {0.0f, 1e-3f, 0.5f}};
  for (int t = 1; t <= 4; ++t) {
    for (int i = 0; i < 3; ++i) p.grad.data<float>()[i] = grads[t - 1][i];
    adam.step(c);
    const double alpha = 1e-3 * std::sqrt(1 - std::pow(0.999, t)) / (1 - std::pow(0.9, t));
    for (int i = 0; i < 3; ++i) {
      const double g = grads[t - 1][i];
      m[i] += (g - m[i]) * (1 - 0.9);
      v[i] += (g * g - v[i]) * (1 - 0.999);
      w[i] -= m[i] * alpha / (std::sqrt(v[i]) + 1e-7);
      EXPECT_NEAR(p.value.data<float>()[i], w[i], 1e-6) << "step " << t << " element " << i;
    }
  }
  EXPECT_EQ(adam.iterations(), 4);
  const auto state = adam.state();
  ASSERT_EQ(state.size(), 5u);
  EXPECT_EQ(state[0].name, "w/m");
  EXPECT_EQ(state[1].name, "w/v");
  EXPECT_EQ(state[2].name, "b/m");
  EXPECT_EQ(state[4].name, "iterations");
  EXPECT_TRUE(state[4].shape.empty());
  EXPECT_NEAR(values(*state[0].tensor)[2], m[2], 1e-7);
  EXPECT_EQ(values(*state[4].tensor)[0], 4.0f);
}

TEST(Adam, StateViewsRestoreAnOptimizer) {
  nn::ParameterSet pa, pb;
  nn::Parameter& a = pa.add("a", {2});
  nn::Parameter& b = pb.add("a", {2});
  pa.allocate(Device::Cpu);
  pb.allocate(Device::Cpu);
  for (nn::Parameter* p : {&a, &b}) {
    p->value.data<float>()[0] = 1, p->value.data<float>()[1] = 2;
    p->grad.data<float>()[0] = 0.1f, p->grad.data<float>()[1] = -0.1f;
  }
  ops::Context c;
  Adam first(pa), second(pb);
  first.step(c);
  first.step(c);
  auto from = first.state(), to = second.state();
  for (size_t i = 0; i < from.size(); ++i) to[i].tensor->copy_from(*from[i].tensor);
  b.value.copy_from(a.value);
  first.step(c);
  second.step(c);
  EXPECT_EQ(values(a.value), values(b.value));
  EXPECT_EQ(second.iterations(), 3);
}

}  // namespace
}  // namespace fp8kit::optim
