// Calibrated scales on numerics' scale math.
#include "quant/scales.h"

#include "base/error.h"
#include "numerics/scale.h"

#include <algorithm>
#include <span>

namespace fp8kit::quant {

float scale_inv_from_amax(float amax, Fp8Format format, int margin) {
  FP8KIT_CHECK(margin >= 0 && margin <= 16, "a scale margin must be 0 to 16, not {}", margin);
  return 1.0f / current_scale(amax, format, {.margin = margin});
}

float calibrated_amax(const ActivationStats& stats, const ScalePolicy& policy) {
  if (!policy.percentile) return stats.amax();
  FP8KIT_CHECK(*policy.percentile > 0.0 && *policy.percentile <= 100.0, "a percentile must be in (0, 100], not {}",
               *policy.percentile);
  return stats.percentile(*policy.percentile / 100.0);
}

float calibrated_scale_inv(const ActivationStats& stats, const ScalePolicy& policy) {
  return scale_inv_from_amax(calibrated_amax(stats, policy), policy.format, policy.margin);
}

std::vector<float> calibrated_head_amax(const ActivationStats& stats, int64_t head_dim, const ScalePolicy& policy) {
  const size_t channels = stats.channel_amax.size(), dim = static_cast<size_t>(head_dim);
  FP8KIT_CHECK(head_dim > 0 && channels > 0 && channels % dim == 0,
               "statistics of {} channels do not split into heads of {} channels", channels, head_dim);
  const float cap = calibrated_amax(stats, policy);
  std::vector<float> amax;
  for (size_t begin = 0; begin < channels; begin += dim) {
    const auto head = std::span(stats.channel_amax).subspan(begin, dim);
    amax.push_back(std::min(*std::ranges::max_element(head), cap));
  }
  return amax;
}

}  // namespace fp8kit::quant
