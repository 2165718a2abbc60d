// numpy's legacy RandomState shuffle and Keras' validation split.
#include "data/split.h"

#include "base/error.h"

#include <cmath>
#include <numeric>
#include <random>

namespace fp8kit::data {

namespace {

// numpy's random_interval(max) for max < 2^32: masked rejection sampling of 32-bit draws.
uint32_t random_interval(std::mt19937& rng, uint32_t max) {
  if (max == 0) return 0;
  uint32_t mask = max;
  mask |= mask >> 1;
  mask |= mask >> 2;
  mask |= mask >> 4;
  mask |= mask >> 8;
  mask |= mask >> 16;
  uint32_t value;
  do {
    value = static_cast<uint32_t>(rng()) & mask;
  } while (value > max);
  return value;
}

}  // namespace

std::vector<int64_t> numpy_permutation(int64_t n, uint32_t seed) {
  FP8KIT_CHECK(n >= 0 && n <= int64_t{UINT32_MAX}, "cannot shuffle {} items (need 0 <= n < 2^32)", n);
  std::vector<int64_t> a(n);
  std::iota(a.begin(), a.end(), int64_t{0});
  std::mt19937 rng(seed);
  for (int64_t i = n - 1; i >= 1; --i) {
    const uint32_t j = random_interval(rng, static_cast<uint32_t>(i));
    std::swap(a[i], a[j]);
  }
  return a;
}

SplitIndices validation_split(int64_t n, double validation_fraction, uint32_t seed) {
  FP8KIT_CHECK(validation_fraction >= 0.0 && validation_fraction < 1.0,
               "validation fraction must be in [0, 1), got {}", validation_fraction);
  const std::vector<int64_t> order = numpy_permutation(n, seed);
  const auto num_validation = static_cast<int64_t>(validation_fraction * static_cast<double>(n));  // Python int()
  SplitIndices split;
  split.train.assign(order.begin(), order.end() - num_validation);
  split.validation.assign(order.end() - num_validation, order.end());
  return split;
}

}  // namespace fp8kit::data
