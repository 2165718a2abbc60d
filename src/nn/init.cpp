// Keras fan rule, Glorot limit, and seeded uniform and normal fills.
#include "nn/init.h"

#include "base/error.h"

#include <cmath>

namespace fp8kit::nn {

Fans keras_fans(std::span<const int64_t> shape) {
  FP8KIT_CHECK(!shape.empty(), "fans of a scalar are undefined");
  if (shape.size() == 1) return {static_cast<double>(shape[0]), static_cast<double>(shape[0])};
  if (shape.size() == 2) return {static_cast<double>(shape[0]), static_cast<double>(shape[1])};
  double receptive = 1.0;
  for (size_t i = 0; i + 2 < shape.size(); ++i) receptive *= static_cast<double>(shape[i]);
  return {static_cast<double>(shape[shape.size() - 2]) * receptive,
          static_cast<double>(shape[shape.size() - 1]) * receptive};
}

float glorot_uniform_limit(std::span<const int64_t> shape) {
  const Fans f = keras_fans(shape);
  return static_cast<float>(std::sqrt(6.0 / (f.fan_in + f.fan_out)));
}

void fill_uniform(std::span<float> values, float lo, float hi, std::mt19937_64& rng) {
  for (float& v : values) {
    const float u = static_cast<float>(rng() >> 40) * 0x1p-24f;
    v = lo + (hi - lo) * u;
  }
}

void fill_normal(std::span<float> values, float stddev, std::mt19937_64& rng) {
  constexpr double kTwoPi = 6.283185307179586;
  for (float& v : values) {
    const double u1 = (static_cast<double>(rng() >> 11) + 1.0) * 0x1p-53;  // (0, 1]: log is finite
    const double u2 = static_cast<double>(rng() >> 11) * 0x1p-53;
    v = static_cast<float>(stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(kTwoPi * u2));
  }
}

}  // namespace fp8kit::nn
