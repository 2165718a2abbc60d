// Current scaling's scales on the GPU against numerics' current_scale (and ScalingState::scale_inv's
// 1 / scale), bit for bit: awkward amaxes (0, -0, subnormal, tiny enough to overflow the scale, inf,
// NaN, FLT_MAX), both formats, margins and power-of-two rounding; a strided scale_inv output, and
// the tensors not asked for left untouched.
#include "ops/cuda/current_scaling.h"

#include <gtest/gtest.h>

#include <bit>
#include <cfloat>
#include <cmath>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "numerics/format.h"
#include "ops/cuda/gpu_test.h"
#include "runtime/cuda/device_buffer.h"

namespace fp8kit::cuda {
namespace {

uint32_t bits(float x) { return std::bit_cast<uint32_t>(x); }

TEST(CudaCurrentScaling, MatchesNumericsCurrentScaleBitForBit) {
  FP8KIT_REQUIRE_GPU();
  std::vector<float> amax = {0.0f, -0.0f, 1e-40f, 1e-39f, std::numeric_limits<float>::denorm_min(), 1e-36f, 1.0f,
                             448.0f, 57344.0f, 3.7f, 0.013f, FLT_MAX, std::numeric_limits<float>::infinity(),
                             std::numeric_limits<float>::quiet_NaN()};
  std::mt19937 rng(9);
  std::uniform_real_distribution<float> log_amax(-30.0f, 30.0f);
  while (amax.size() < 30)
    amax.push_back(std::exp2(log_amax(rng)) * (1.0f + static_cast<float>(rng() % 1000) / 999.0f));
  const int64_t n = static_cast<int64_t>(amax.size());
  std::vector<Fp8Format> formats(n);
  std::vector<float> fp8_max(n);
  for (int64_t i = 0; i < n; ++i) {
    formats[i] = i % 3 == 2 ? Fp8Format::E5M2 : Fp8Format::E4M3;
    fp8_max[i] = fp8kit::fp8_max(formats[i]);
  }
  constexpr int64_t kStride = 4;
  constexpr float kPoison = -7.0f;
  DeviceBuffer<float> d_amax(n), d_fp8_max(n), d_scale(n), d_scale_inv(n * kStride);
  d_amax.upload(amax);
  d_fp8_max.upload(fp8_max);
  std::vector<int> tensors;
  for (int i = 0; i < n; ++i)
    if (i != 5) tensors.push_back(i);  // tensor 5 is not asked for
  for (const ScaleOptions options : {ScaleOptions{0, false}, ScaleOptions{2, false}, ScaleOptions{0, true},
                                     ScaleOptions{3, true}}) {
    d_scale.upload(std::vector<float>(n, kPoison));
    d_scale_inv.upload(std::vector<float>(n * kStride, kPoison));
    current_scales(tensors, d_amax.data(), d_fp8_max.data(), options, d_scale.data(), d_scale_inv.data(), kStride,
                   nullptr);
    const std::vector<float> scale = d_scale.to_host(), scale_inv = d_scale_inv.to_host();
    for (int64_t i = 0; i < n; ++i) {
      const std::string where = "amax " + std::to_string(amax[i]) + " margin " + std::to_string(options.margin) +
                                " power_of_two " + std::to_string(options.power_of_two);
      const float want = i == 5 ? kPoison : current_scale(amax[i], formats[i], options);
      EXPECT_EQ(bits(scale[i]), bits(want)) << where;
      EXPECT_EQ(bits(scale_inv[i * kStride]), bits(i == 5 ? kPoison : 1.0f / want)) << where;
      for (int64_t k = 1; k < kStride; ++k) EXPECT_EQ(bits(scale_inv[i * kStride + k]), bits(kPoison)) << where;
    }
  }
}

// More tensors than one launch takes (a Llama's 49 weights): every one gets its scale.
TEST(CudaCurrentScaling, ManyTensorsTakeSeveralLaunches) {
  FP8KIT_REQUIRE_GPU();
  constexpr int kCount = 70;
  std::vector<float> amax(kCount), fp8_max(kCount, 448.0f);
  std::vector<int> all(kCount);
  for (int i = 0; i < kCount; ++i) {
    amax[i] = 0.5f + static_cast<float>(i);
    all[i] = i;
  }
  DeviceBuffer<float> d_amax(kCount), d_max(kCount), d_scale(kCount), d_inv(kCount);
  d_amax.upload(amax);
  d_max.upload(fp8_max);
  current_scales(all, d_amax.data(), d_max.data(), {}, d_scale.data(), d_inv.data(), 1, nullptr);
  const std::vector<float> scale = d_scale.to_host();
  for (int i = 0; i < kCount; ++i) EXPECT_EQ(scale[i], current_scale(amax[i], Fp8Format::E4M3, {})) << i;
}

TEST(CudaCurrentScaling, RejectsBadArguments) {
  FP8KIT_REQUIRE_GPU();
  DeviceBuffer<float> buffer(64);
  const std::vector<int> negative = {-1};
  EXPECT_THROW(current_scales(negative, buffer.data(), buffer.data(), {}, buffer.data(), buffer.data(), 1, nullptr),
               Error);
  EXPECT_THROW(
      current_scales(std::vector<int>{0}, nullptr, buffer.data(), {}, buffer.data(), buffer.data(), 1, nullptr), Error);
}

}  // namespace
}  // namespace fp8kit::cuda
