// Adam against Keras 3's update written out by hand in double for a few steps, and its state views.
#include "optim/adam.h"

#include <gtest/gtest.h>

#include <cmath>

namespace fp8kit::optim {
namespace {

TEST(Adam, MatchesKerasUpdate) {
  nn::Parameter p{"w", {3}, {0.5f, -1.0f, 2.0f}, {0, 0, 0}};
  Adam adam({&p}, {});
  double w[3] = {0.5, -1.0, 2.0}, m[3] = {}, v[3] = {};
  const float grads[4][3] = {{0.1f, -0.2f, 0.0f}, {0.3f, 0.1f, -1e-4f}, {-0.5f, 0.0f, 2.0f}, {0.0f, 1e-3f, 0.5f}};
  for (int t = 1; t <= 4; ++t) {
    for (int i = 0; i < 3; ++i) p.grad[i] = grads[t - 1][i];
    adam.step();
    const double alpha = 1e-3 * std::sqrt(1 - std::pow(0.999, t)) / (1 - std::pow(0.9, t));
    for (int i = 0; i < 3; ++i) {
      const double g = grads[t - 1][i];
      m[i] += (g - m[i]) * (1 - 0.9);
      v[i] += (g * g - v[i]) * (1 - 0.999);
      w[i] -= m[i] * alpha / (std::sqrt(v[i]) + 1e-7);
      EXPECT_NEAR(p.value[i], w[i], 1e-6) << "step " << t << " element " << i;
    }
  }
  EXPECT_EQ(adam.iterations(), 4);
  const auto state = adam.state();
  ASSERT_EQ(state.size(), 3u);
  EXPECT_EQ(state[0].name, "w/m");
  EXPECT_EQ(state[1].name, "w/v");
  EXPECT_EQ(state[2].name, "iterations");
  EXPECT_TRUE(state[2].shape.empty());
  EXPECT_NEAR(state[0].data[2], m[2], 1e-7);
  EXPECT_EQ(state[2].data[0], 4.0f);
}

TEST(Adam, StateViewsRestoreAnOptimizer) {
  nn::Parameter a{"a", {2}, {1, 2}, {0.1f, -0.1f}}, b{"a", {2}, {1, 2}, {0.1f, -0.1f}};
  Adam first({&a}), second({&b});
  first.step();
  first.step();
  auto from = first.state(), to = second.state();
  for (size_t i = 0; i < from.size(); ++i) std::copy(from[i].data.begin(), from[i].data.end(), to[i].data.begin());
  b.value = a.value;
  first.step();
  second.step();
  EXPECT_EQ(a.value, b.value);
  EXPECT_EQ(second.iterations(), 3);
}

}  // namespace
}  // namespace fp8kit::optim
