// The batched delayed-scaling update on the GPU against the CPU's ScalingState (numerics/recipe.h),
// step by step and bit for bit: every lag, amax algorithm, skip-zero, margin and power-of-two setting.
#include "ops/cuda/scaling_update.h"

#include <gtest/gtest.h>

#include <bit>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "numerics/recipe.h"
#include "ops/cuda/gpu_test.h"
#include "runtime/cuda/device_buffer.h"

namespace fp8kit::cuda {
namespace {

uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }

// per_tensor: the batch's per-tensor current flags (empty: none, recipe.mode for all).
void check_recipe(const Fp8Recipe& recipe, int64_t history_length, const std::string& what,
                  const std::vector<int32_t>& per_tensor = {}) {
  constexpr int64_t kTensors = 5;
  const Fp8Format formats[kTensors] = {Fp8Format::E4M3, Fp8Format::E4M3, Fp8Format::E5M2, Fp8Format::E4M3, Fp8Format::E5M2};
  std::vector<ScalingState> cpu(kTensors, ScalingState(history_length));
  std::vector<float> fp8_max(kTensors), scale(kTensors, 1.0f), scale_inv(kTensors, 1.0f);
  for (int64_t i = 0; i < kTensors; ++i) fp8_max[i] = fp8kit::fp8_max(formats[i]);

  DeviceBuffer<float> d_history(kTensors * history_length), d_amax(kTensors), d_scale(kTensors), d_scale_inv(kTensors),
      d_fp8_max(kTensors);
  DeviceBuffer<int32_t> d_current(kTensors);
  if (!per_tensor.empty()) d_current.upload(per_tensor);
  d_history.fill_bytes(0);
  d_scale.upload(scale);
  d_scale_inv.upload(scale_inv);
  d_fp8_max.upload(fp8_max);
  const ScalingBatch batch{kTensors, history_length, d_history.data(), d_amax.data(), d_scale.data(), d_scale_inv.data(),
                           d_fp8_max.data(), per_tensor.empty() ? nullptr : d_current.data()};
  auto tensor_recipe = [&](int64_t i) {
    Fp8Recipe r = recipe;
    if (!per_tensor.empty()) r.mode = per_tensor[i] != 0 ? ScalingMode::Current : ScalingMode::Delayed;
    return r;
  };

  std::mt19937 rng(history_length * 31 + static_cast<int>(recipe.lag));
  std::uniform_real_distribution<float> log_amax(-12.0f, 12.0f);
  for (int step = 0; step < 40; ++step) {
    std::vector<float> amax(kTensors);
    for (float& a : amax) {
      const uint32_t kind = rng() % 16;
      a = kind == 0 ? 0.0f : kind == 1 ? std::numeric_limits<float>::infinity() : std::exp2(log_amax(rng));
    }
    if (step == 17) amax[3] = std::numeric_limits<float>::quiet_NaN();
    if (step == 23) amax[1] = 1e-40f;  // subnormal amax: the scale overflows to FLT_MAX
    d_amax.upload(amax);
    update_scaling(batch, recipe);
    for (int64_t i = 0; i < kTensors; ++i) {
      const Fp8Recipe r = tensor_recipe(i);
      cpu[i].record_amax(amax[i], r, formats[i]);
      if (r.mode == ScalingMode::Delayed && r.lag == ScalingLag::Te) cpu[i].scale_for_step(r, formats[i]);
    }
    const std::vector<float> history = d_history.to_host(), got_scale = d_scale.to_host(), got_inv = d_scale_inv.to_host();
    for (int64_t i = 0; i < kTensors; ++i) {
      const std::string where = what + " step " + std::to_string(step) + " tensor " + std::to_string(i);
      const auto window = cpu[i].amax_history.values();
      for (int64_t j = 0; j < history_length; ++j)
        ASSERT_EQ(bits(history[i * history_length + j]), bits(window[j])) << where << " slot " << j;
      // Current: the scale is the cast's (here the initial 1), scale_inv its inverse.
      ASSERT_EQ(bits(got_scale[i]), bits(cpu[i].scale)) << where << " scale";
      ASSERT_EQ(bits(got_inv[i]), bits(cpu[i].scale_inv(tensor_recipe(i)))) << where << " scale_inv";
    }
  }
}

TEST(CudaScalingUpdate, MatchesScalingStateForEveryRecipe) {
  FP8KIT_REQUIRE_GPU();
  for (ScalingLag lag : {ScalingLag::Te, ScalingLag::Keras})
    for (AmaxAlgorithm algorithm : {AmaxAlgorithm::Max, AmaxAlgorithm::MostRecent})
      for (bool skip_zero : {false, true})
        for (int64_t length : {1, 16, 1024})
          for (int option = 0; option < 3; ++option) {
            Fp8Recipe recipe;
            recipe.lag = lag;
            recipe.amax_algorithm = algorithm;
            recipe.skip_zero_amax = skip_zero;
            recipe.scale_options.margin = option == 1 ? 2 : 0;
            recipe.scale_options.power_of_two = option == 2;
            check_recipe(recipe, length,
                         std::string(lag == ScalingLag::Te ? "te" : "keras") +
                             (algorithm == AmaxAlgorithm::Max ? " max" : " most_recent") + (skip_zero ? " skip0" : "") +
                             " L=" + std::to_string(length) + " option " + std::to_string(option));
          }
}

TEST(CudaScalingUpdate, CurrentScalingOnlyRecords) {
  FP8KIT_REQUIRE_GPU();
  Fp8Recipe recipe;
  recipe.mode = ScalingMode::Current;
  check_recipe(recipe, 16, "current");
}

TEST(CudaScalingUpdate, PerTensorModesMixDelayedAndCurrent) {
  FP8KIT_REQUIRE_GPU();
  for (ScalingLag lag : {ScalingLag::Te, ScalingLag::Keras}) {
    Fp8Recipe recipe;
    recipe.lag = lag;
    check_recipe(recipe, 16, lag == ScalingLag::Te ? "mixed te" : "mixed keras", {0, 1, 0, 1, 1});
  }
}

TEST(CudaScalingUpdate, BadBatchesAreNamed) {
  FP8KIT_REQUIRE_GPU();
  DeviceBuffer<float> buf(16);
  ScalingBatch batch{2, 0, buf.data(), buf.data(), buf.data(), buf.data(), buf.data()};
  EXPECT_THROW(update_scaling(batch, Fp8Recipe{}), Error);
  batch.history_length = 100000;
  EXPECT_THROW(update_scaling(batch, Fp8Recipe{}), Error);
  batch.history_length = 4;
  batch.fp8_max = nullptr;
  EXPECT_THROW(update_scaling(batch, Fp8Recipe{}), Error);
}

}  // namespace
}  // namespace fp8kit::cuda
