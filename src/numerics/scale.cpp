// Scale math of the spec's "Scale from amax" section, with its guards.
#include "numerics/scale.h"

#include <bit>
#include <cfloat>
#include <cmath>
#include <cstdint>

namespace fp8kit {
namespace {

bool usable_amax(float amax) { return amax > 0.0f && std::isfinite(amax); }

// (fp8_max / amax) / 2^margin for a usable amax; FLT_MAX when that overflows.
float scale_from_amax(float amax, Fp8Format format, ScaleOptions options) {
  float scale = (fp8_max(format) / amax) / std::exp2(static_cast<float>(options.margin));
  if (std::isinf(scale)) scale = FLT_MAX;
  if (options.power_of_two) scale = round_down_to_power_of_two(scale);
  return scale;
}

}  // namespace

float round_down_to_power_of_two(float scale) {
  return std::bit_cast<float>(std::bit_cast<uint32_t>(scale) & 0xFF800000u);  // clear the mantissa
}

float delayed_scale(float amax, float previous, Fp8Format format, ScaleOptions options) {
  return usable_amax(amax) ? scale_from_amax(amax, format, options) : previous;
}

float current_scale(float amax, Fp8Format format, ScaleOptions options) {
  return usable_amax(amax) ? scale_from_amax(amax, format, options) : 1.0f;
}

float keras_scale_multiplier(float amax, float previous_multiplier, Fp8Format format, ScaleOptions options) {
  // Keras: sf = where(amax > 0 && finite, fp8_max / amax / 2^margin, 1 / previous); return 1 / sf.
  const float sf = usable_amax(amax) ? scale_from_amax(amax, format, options) : 1.0f / previous_multiplier;
  return 1.0f / sf;
}

}  // namespace fp8kit
