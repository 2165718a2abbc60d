// Shared helpers of the GPU tests: skip without a GPU, random test inputs with FP8's special values,
// and the relative Frobenius error used for GEMM tolerances.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "runtime/cuda/device_info.h"

namespace fp8kit::cuda::testing {

inline bool has_gpu() {
  static const bool present = !list_devices().empty();
  return present;
}

#define FP8KIT_REQUIRE_GPU() \
  if (!::fp8kit::cuda::testing::has_gpu()) GTEST_SKIP() << "no CUDA GPU on this machine"

// Random float32 bit patterns (NaN of both signs, inf, subnormals), values across and beyond FP8's
// range, and the rounding ties and overflow edges of both formats.
inline std::vector<float> awkward_floats(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-24, 18);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    x[i] = rng() % 4 == 0 ? std::bit_cast<float>(static_cast<uint32_t>(rng())) : std::ldexp(normal(rng), exponent(rng));
  }
  const float specials[] = {0.0f, -0.0f, 448.0f, 464.0f, -464.0f, 480.0f, 1.0625f, 1.1875f, 57344.0f, 61440.0f,
                            -61440.0f, 0x1p-10f, 1.5f * 0x1p-10f, 0x1p-17f, std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::quiet_NaN(), std::bit_cast<float>(0xFF800001u),
                            std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::max()};
  for (size_t i = 0; i < std::size(specials) && i < n; ++i) x[(i * 7919) % n] = specials[i];
  return x;
}

// max |x|, NaN ignored, inf counted (fp8kit::amax's semantics), written out plainly.
inline float reference_amax(const std::vector<float>& x) {
  float m = 0.0f;
  for (float v : x)
    if (!std::isnan(v)) m = std::max(m, std::fabs(v));
  return m;
}

// ||y - ref|| / ||ref|| over all elements, in double.
inline double relative_error(const std::vector<float>& y, const std::vector<double>& ref) {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < y.size(); ++i) {
    diff += (y[i] - ref[i]) * (y[i] - ref[i]);
    norm += ref[i] * ref[i];
  }
  return std::sqrt(diff / norm);
}

// n normal(0, stddev) floats (never zeros: they hide unwritten outputs).
inline std::vector<float> random_normal(size_t n, uint32_t seed, float stddev = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, stddev);
  std::vector<float> x(n);
  for (float& v : x) v = normal(rng);
  return x;
}

// ||got - want|| / ||want|| in double (0 when both are zero).
// Whether a and b hold the same float bits (a run's result against another's).
inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](float x, float y) {
           return std::bit_cast<uint32_t>(x) == std::bit_cast<uint32_t>(y);
         });
}

inline double relative_l2(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    diff += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
    norm += static_cast<double>(want[i]) * want[i];
  }
  return norm == 0.0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

// Largest distance in units in the last place between same-sign finite floats (NaN anywhere: huge).
inline int64_t max_ulp_difference(const std::vector<float>& got, const std::vector<float>& want) {
  int64_t worst = 0;
  for (size_t i = 0; i < got.size() && i < want.size(); ++i) {
    if (std::isnan(got[i]) || std::isnan(want[i])) return std::numeric_limits<int64_t>::max();
    const auto ordered = [](float f) {
      const int32_t b = std::bit_cast<int32_t>(f);
      return b < 0 ? int64_t{INT32_MIN} - b : int64_t{b};
    };
    worst = std::max(worst, std::abs(ordered(got[i]) - ordered(want[i])));
  }
  return worst;
}

}  // namespace fp8kit::cuda::testing
