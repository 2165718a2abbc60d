// Recipes and ScalingState (recipe.h): which scale each step uses under te and keras lags and current
// scaling, stepped by hand against the spec's "Amax history" section.
#include "numerics/recipe.h"

#include "base/error.h"
#include "numerics/cast.h"
#include "numerics/convert.h"

#include <gtest/gtest.h>

#include <limits>
#include <vector>

namespace fp8kit {
namespace {

// Runs `amaxes.size()` steps; returns the scale each step quantized with.
std::vector<float> scales_used(const Fp8Recipe& recipe, const std::vector<float>& amaxes, Fp8Format format = Fp8Format::E4M3) {
  ScalingState state(recipe.amax_history_length);
  std::vector<float> used;
  for (float a : amaxes) {
    used.push_back(state.scale_for_step(recipe, format, a));
    state.record_amax(a, recipe, format);
  }
  return used;
}

TEST(Recipe, TeLagUsesAmaxesUpToTheStepBefore) {
  Fp8Recipe te{.amax_history_length = 16, .amax_algorithm = AmaxAlgorithm::MostRecent};
  EXPECT_EQ(scales_used(te, {1, 2, 3, 4}), (std::vector<float>{1.0f, 448.0f / 1, 448.0f / 2, 448.0f / 3}));
  te.amax_algorithm = AmaxAlgorithm::Max;
  EXPECT_EQ(scales_used(te, {4, 3, 2, 1}), (std::vector<float>{1.0f, 448.0f / 4, 448.0f / 4, 448.0f / 4}));
  te.amax_history_length = 2;  // window of 2: step 3 sees amax_1, amax_2 only
  EXPECT_EQ(scales_used(te, {4, 3, 2, 1}), (std::vector<float>{1.0f, 448.0f / 4, 448.0f / 4, 448.0f / 3}));
}

TEST(Recipe, KerasLagUsesAmaxesUpToTwoStepsBefore) {
  Fp8Recipe keras{.lag = ScalingLag::Keras, .amax_history_length = 16, .amax_algorithm = AmaxAlgorithm::MostRecent};
  const auto used = scales_used(keras, {1, 2, 3, 4, 5});
  ASSERT_EQ(used.size(), 5u);
  EXPECT_EQ(used[0], 1.0f);
  EXPECT_EQ(used[1], 1.0f);
  // Step t uses amax_{t-2}; `scale` is 1 / Keras's multiplier.
  for (int t = 2; t < 5; ++t) EXPECT_EQ(used[t], 1.0f / (1.0f / (448.0f / static_cast<float>(t - 1)))) << t;
}

TEST(Recipe, KerasStateKeepsTheMultiplierAndQuantizesByDividing) {
  const Fp8Recipe keras{.lag = ScalingLag::Keras, .amax_history_length = 4};
  ScalingState state(4);
  const Fp8Format f = Fp8Format::E4M3;
  const std::vector<float> amaxes{3.0f, 7.0f, 1.0f};
  for (float a : amaxes) {
    state.scale_for_step(keras, f);
    state.record_amax(a, keras, f);
  }
  // After three steps the stored multiplier came from max(amax_0, amax_1) = 7.
  EXPECT_EQ(state.keras_multiplier, 1.0f / (448.0f / 7.0f));
  EXPECT_EQ(state.scale_inv(keras), state.keras_multiplier);
  std::vector<float> x{0.05f, -1.3f, 6.9f, 1e-4f, 100.0f};
  std::vector<uint8_t> q(x.size());
  EXPECT_EQ(quantize_for_step(state, keras, x, f, q), 100.0f);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(q[i], encode_fp8(x[i] / state.keras_multiplier, f)) << x[i];
}

TEST(Recipe, KerasFirstStepsRunWithScaleOne) {
  // With scale 1.0, E4M3 inputs around 0.05 land in subnormals (min normal 2^-6 = 0.0156 is close).
  const Fp8Recipe keras{.lag = ScalingLag::Keras, .amax_history_length = 4};
  ScalingState state(4);
  std::vector<float> x{0.05f, 0.003f};
  std::vector<uint8_t> q(2);
  for (int step = 0; step < 2; ++step) {
    EXPECT_EQ(state.scale_for_step(keras, Fp8Format::E4M3), 1.0f);
    quantize_for_step(state, keras, x, Fp8Format::E4M3, q);
    EXPECT_EQ(q[1], encode_fp8(0.003f, Fp8Format::E4M3));  // 0.003 -> subnormal 2^-9 * 2
    EXPECT_EQ(decode_fp8(q[1], Fp8Format::E4M3), 0x1p-8f);
    state.record_amax(0.05f, keras, Fp8Format::E4M3);
  }
  EXPECT_EQ(state.scale_for_step(keras, Fp8Format::E4M3), 1.0f / (1.0f / (448.0f / 0.05f)));
}

TEST(Recipe, TeStateQuantizesByMultiplying) {
  const Fp8Recipe te{.amax_history_length = 4};
  ScalingState state(4);
  state.record_amax(3.0f, te, Fp8Format::E4M3);
  const float scale = state.scale_for_step(te, Fp8Format::E4M3);
  EXPECT_EQ(scale, 448.0f / 3.0f);
  EXPECT_EQ(state.scale_inv(te), 1.0f / scale);
  std::vector<float> x{0.05f, -1.3f, 2.9f};
  std::vector<uint8_t> q(x.size());
  quantize_for_step(state, te, x, Fp8Format::E4M3, q);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(q[i], encode_fp8(x[i] * scale, Fp8Format::E4M3));
}

TEST(Recipe, CurrentScalingUsesThisTensorsAmax) {
  const Fp8Recipe current{.mode = ScalingMode::Current, .amax_history_length = 4};
  EXPECT_EQ(scales_used(current, {2, 4, 0, 8}),
            (std::vector<float>{224.0f, 112.0f, 1.0f, 56.0f}));
  EXPECT_EQ(scales_used(current, {2}, Fp8Format::E5M2), (std::vector<float>{28672.0f}));
}

TEST(Recipe, SkipZeroAmaxKeepsTheWindow) {
  Fp8Recipe te{.amax_history_length = 2};
  // Steps with amaxes 8, 2, 0, 0: without skipping the zeros push 8 out of the window.
  EXPECT_EQ(scales_used(te, {8, 2, 0, 0}), (std::vector<float>{1.0f, 56.0f, 56.0f, 224.0f}));
  te.skip_zero_amax = true;
  EXPECT_EQ(scales_used(te, {8, 2, 0, 0}), (std::vector<float>{1.0f, 56.0f, 56.0f, 56.0f}));
}

TEST(Recipe, BadAmaxesKeepTheScale) {
  const Fp8Recipe te{.amax_history_length = 1};
  EXPECT_EQ(scales_used(te, {4, std::numeric_limits<float>::infinity(), 0, 8}),
            (std::vector<float>{1.0f, 112.0f, 112.0f, 112.0f}));
}

TEST(Recipe, Parse) {
  EXPECT_EQ(parse_scaling_mode("delayed"), ScalingMode::Delayed);
  EXPECT_EQ(parse_scaling_mode("current"), ScalingMode::Current);
  EXPECT_EQ(parse_scaling_mode("block"), ScalingMode::Block);
  EXPECT_EQ(parse_scaling_lag("te"), ScalingLag::Te);
  EXPECT_EQ(parse_scaling_lag("keras"), ScalingLag::Keras);
  EXPECT_THROW(parse_scaling_mode("jit"), Error);
  EXPECT_THROW(parse_scaling_lag("flax"), Error);
  EXPECT_EQ(parse_amax_algorithm("max"), AmaxAlgorithm::Max);
  EXPECT_EQ(parse_amax_algorithm("most_recent"), AmaxAlgorithm::MostRecent);
  EXPECT_THROW(parse_amax_algorithm("most-recent"), Error);
}

TEST(Recipe, FormatsAreHybridOrE4m3) {
  Fp8Recipe recipe;
  set_fp8_formats(recipe, "e4m3");
  EXPECT_EQ(recipe.forward_format, Fp8Format::E4M3);
  EXPECT_EQ(recipe.backward_format, Fp8Format::E4M3);
  set_fp8_formats(recipe, "hybrid");
  EXPECT_EQ(recipe.forward_format, Fp8Format::E4M3);
  EXPECT_EQ(recipe.backward_format, Fp8Format::E5M2);
  try {
    set_fp8_formats(recipe, "e5m2");
    FAIL() << "e5m2 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("E5M2 x E5M2 GEMMs"), std::string::npos) << e.what();
  }
  EXPECT_THROW(set_fp8_formats(recipe, "fp8"), Error);
}

TEST(Recipe, DescribeNamesWhatAppliesToTheMode) {
  Fp8Recipe recipe;
  EXPECT_EQ(describe(recipe), "delayed scaling, te lag, amax history 1024, max amax, e4m3 forward, e5m2 backward");
  recipe.mode = ScalingMode::Block;  // no lag or history; the formats and scale options
  recipe.skip_zero_amax = true;
  recipe.scale_options.power_of_two = true;
  set_fp8_formats(recipe, "e4m3");
  EXPECT_EQ(describe(recipe), "block scaling (1x128 activations and gradients, 128x128 weights), e4m3 forward, "
                              "e4m3 backward, power-of-two scales");
}

}  // namespace
}  // namespace fp8kit
