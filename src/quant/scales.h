// Scales from calibrated amaxes, in the checkpoint convention (spec/checkpoints.md): the stored
// "scale" is the dequantization multiplier scale_inv = amax / fp8_max (448 for E4M3, 57344 for E5M2),
// with 2^margin headroom, optionally from a percentile of the magnitudes instead of the amax.
#pragma once

#include "numerics/format.h"
#include "quant/calibration.h"

#include <cstdint>
#include <optional>
#include <vector>

namespace fp8kit::quant {

struct ScalePolicy {
  Fp8Format format = Fp8Format::E4M3;
  int margin = 0;                     // scale_inv times 2^margin (0 to 16)
  std::optional<double> percentile{};  // in percent, e.g. 99.9 or 99.99: clip at it instead of the amax
};

// numerics' current scale as a multiplier: 1 / current_scale(amax) = amax / fp8_max * 2^margin, the
// value that quantize_blocks would store for a block of this amax. An amax of 0 (an input never seen
// non-zero), inf or NaN gives 1: there is no range to fit, and the readers refuse a multiplier that is
// not finite and > 0; zeros quantize to zero under any scale.
float scale_inv_from_amax(float amax, Fp8Format format, int margin = 0);

// The amax a calibrated scale derives from: stats.percentile(percentile / 100) when the policy asks for
// one, else stats.amax().
float calibrated_amax(const ActivationStats& stats, const ScalePolicy& policy);
// scale_inv_from_amax(calibrated_amax(stats, policy), ...).
float calibrated_scale_inv(const ActivationStats& stats, const ScalePolicy& policy);

// Per head of `head_dim` consecutive channels (a KV cache's heads): each head's channel amax, capped by
// the whole tensor's calibrated_amax (its percentile clip, when the policy has one: the histogram is per
// tensor). stats must hold a multiple of head_dim channels.
std::vector<float> calibrated_head_amax(const ActivationStats& stats, int64_t head_dim, const ScalePolicy& policy);

}  // namespace fp8kit::quant
