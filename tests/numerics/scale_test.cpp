// Scale math (scale.h): the spec's formulas and guards for delayed, current and Keras scales.
#include "numerics/scale.h"

#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <limits>

namespace fp8kit {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

TEST(Scale, DelayedIsFp8MaxOverAmaxWithMargin) {
  EXPECT_EQ(delayed_scale(2.0f, 1.0f, Fp8Format::E4M3), 224.0f);
  EXPECT_EQ(delayed_scale(2.0f, 1.0f, Fp8Format::E5M2), 28672.0f);
  EXPECT_EQ(delayed_scale(2.0f, 1.0f, Fp8Format::E4M3, {.margin = 1}), 112.0f);
  EXPECT_EQ(delayed_scale(2.0f, 1.0f, Fp8Format::E4M3, {.margin = 3}), 28.0f);
  EXPECT_EQ(delayed_scale(3.0f, 1.0f, Fp8Format::E4M3), 448.0f / 3.0f);
}

TEST(Scale, DelayedKeepsPreviousOnZeroInfNan) {
  for (float bad : {0.0f, -0.0f, kInf, -kInf, kNaN, -1.0f}) {
    EXPECT_EQ(delayed_scale(bad, 7.5f, Fp8Format::E4M3), 7.5f) << bad;
    EXPECT_EQ(delayed_scale(bad, 0.25f, Fp8Format::E5M2), 0.25f) << bad;
  }
}

TEST(Scale, TinyAmaxGivesFltMax) {
  EXPECT_EQ(delayed_scale(1e-40f, 1.0f, Fp8Format::E4M3), FLT_MAX);
  EXPECT_EQ(delayed_scale(std::numeric_limits<float>::denorm_min(), 1.0f, Fp8Format::E5M2), FLT_MAX);
  EXPECT_EQ(current_scale(1e-40f, Fp8Format::E4M3), FLT_MAX);
  // Just representable: finite, no guard.
  EXPECT_EQ(delayed_scale(1e-30f, 1.0f, Fp8Format::E4M3), 448.0f / 1e-30f);
}

TEST(Scale, CurrentFallsBackToOne) {
  EXPECT_EQ(current_scale(4.0f, Fp8Format::E4M3), 112.0f);
  for (float bad : {0.0f, kInf, kNaN}) EXPECT_EQ(current_scale(bad, Fp8Format::E4M3), 1.0f) << bad;
}

TEST(Scale, PowerOfTwoRoundsDown) {
  const ScaleOptions pow2{.power_of_two = true};
  EXPECT_EQ(delayed_scale(3.0f, 1.0f, Fp8Format::E4M3, pow2), 128.0f);  // 149.33 -> 128
  EXPECT_EQ(delayed_scale(448.0f, 1.0f, Fp8Format::E4M3, pow2), 1.0f);
  EXPECT_EQ(delayed_scale(500.0f, 1.0f, Fp8Format::E4M3, pow2), 0.5f);  // 0.896 -> 0.5
  EXPECT_EQ(current_scale(1e-40f, Fp8Format::E4M3, pow2), 0x1p127f);     // FLT_MAX -> 2^127
  EXPECT_EQ(round_down_to_power_of_two(1.999f), 1.0f);
  EXPECT_EQ(round_down_to_power_of_two(0x1p-20f), 0x1p-20f);
}

TEST(Scale, KerasMultiplierIsReciprocalOfFp8MaxOverAmax) {
  // Keras: r = fp8_max / amax in float32, then 1 / r (not amax / fp8_max, which can differ in the last bit).
  for (float amax : {1.0f, 3.0f, 0.05f, 1234.5f, 7e-5f}) {
    EXPECT_EQ(keras_scale_multiplier(amax, 1.0f, Fp8Format::E4M3), 1.0f / (448.0f / amax)) << amax;
    EXPECT_EQ(keras_scale_multiplier(amax, 1.0f, Fp8Format::E5M2), 1.0f / (57344.0f / amax)) << amax;
  }
  EXPECT_EQ(keras_scale_multiplier(2.0f, 1.0f, Fp8Format::E4M3, {.margin = 2}), 1.0f / 56.0f);
  // Kept as 1 / (1 / previous), like Keras.
  for (float bad : {0.0f, kInf, kNaN, -2.0f}) {
    EXPECT_EQ(keras_scale_multiplier(bad, 0.3f, Fp8Format::E4M3), 1.0f / (1.0f / 0.3f)) << bad;
  }
  EXPECT_GT(keras_scale_multiplier(1e-40f, 1.0f, Fp8Format::E4M3), 0.0f);
}

}  // namespace
}  // namespace fp8kit
