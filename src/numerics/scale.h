// Scale math: FP8 scales from amax, with margin and the guards of the spec (TE convention:
// q = fp8(x * scale), x ~= float(q) * scale_inv, scale_inv = 1 / scale).
#pragma once

#include "numerics/format.h"

namespace fp8kit {

struct ScaleOptions {
  int margin = 0;             // leave 2^margin headroom
  bool power_of_two = false;  // round the scale down to a power of two
  bool operator==(const ScaleOptions&) const = default;
};

// Delayed scaling: (fp8_max / amax) / 2^margin. amax 0, inf or NaN keeps `previous`; a result that
// overflows (tiny amax) becomes FLT_MAX.
float delayed_scale(float amax, float previous, Fp8Format format, ScaleOptions options = {});

// Current (just-in-time) scaling: as above from this tensor's own amax; 0, inf or NaN give 1.0.
float current_scale(float amax, Fp8Format format, ScaleOptions options = {});

// Keras's form, as a dequantization multiplier: r = fp8_max / amax (float32), then 1 / r; keeps
// `previous_multiplier` when amax is not > 0 or not finite. Bit-faithful to Keras: the kept value is
// 1 / (1 / previous_multiplier), as Keras computes it. One deviation: where Keras's r overflows to inf
// (amax < ~1e-36) and its multiplier becomes 0, r is FLT_MAX as in delayed_scale, so the multiplier
// stays > 0. margin and power_of_two apply to r.
float keras_scale_multiplier(float amax, float previous_multiplier, Fp8Format format, ScaleOptions options = {});

// Rounds a positive finite scale down to a power of two (clears the mantissa bits).
float round_down_to_power_of_two(float scale);

}  // namespace fp8kit
