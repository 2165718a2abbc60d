// Recipes and the per-tensor scaling state: which scale each step quantizes with, per the spec's
// "Amax history" section (te one-step lag, keras two-step lag, current scaling).
#include "numerics/recipe.h"

#include "base/error.h"
#include "numerics/convert.h"

#include <fmt/format.h>

#include <string>

namespace fp8kit {

ScalingMode parse_scaling_mode(std::string_view text) {
  if (text == "delayed") return ScalingMode::Delayed;
  if (text == "current") return ScalingMode::Current;
  if (text == "block") return ScalingMode::Block;
  fail("unknown scaling mode '{}': use delayed, current or block", text);
}

ScalingLag parse_scaling_lag(std::string_view text) {
  if (text == "te") return ScalingLag::Te;
  if (text == "keras") return ScalingLag::Keras;
  fail("unknown scaling lag '{}': use te or keras", text);
}

AmaxAlgorithm parse_amax_algorithm(std::string_view text) {
  if (text == "max") return AmaxAlgorithm::Max;
  if (text == "most_recent") return AmaxAlgorithm::MostRecent;
  fail("unknown amax algorithm '{}': use max or most_recent", text);
}

void set_fp8_formats(Fp8Recipe& recipe, std::string_view text) {
  if (text == "hybrid") {
    recipe.forward_format = Fp8Format::E4M3;
    recipe.backward_format = Fp8Format::E5M2;
  } else if (text == "e4m3") {
    recipe.forward_format = recipe.backward_format = Fp8Format::E4M3;
  } else if (text == "e5m2") {
    fail("FP8 formats 'e5m2' would need E5M2 x E5M2 GEMMs, which FP8 tensor cores do not run: use hybrid or e4m3");
  } else {
    fail("unknown FP8 formats '{}': use hybrid (E4M3 forward, E5M2 backward) or e4m3", text);
  }
}

std::string describe(const Fp8Recipe& r) {
  std::string text =
      r.mode == ScalingMode::Block
          ? fmt::format("block scaling (1x128 activations and gradients, 128x128 weights), {} forward, {} backward",
                        name(r.forward_format), name(r.backward_format))
          : fmt::format("{} scaling, {} lag, amax history {}, {} amax, {} forward, {} backward",
                        r.mode == ScalingMode::Delayed ? "delayed" : "current", r.lag == ScalingLag::Te ? "te" : "keras",
                        r.amax_history_length, r.amax_algorithm == AmaxAlgorithm::Max ? "max" : "most_recent",
                        name(r.forward_format), name(r.backward_format));
  if (r.scale_options.margin != 0) text += fmt::format(", margin {}", r.scale_options.margin);
  if (r.scale_options.power_of_two) text += ", power-of-two scales";
  if (r.skip_zero_amax && r.mode != ScalingMode::Block) text += ", skip zero amax";
  return text;
}

float ScalingState::scale_for_step(const Fp8Recipe& recipe, Fp8Format format, float current_amax) {
  if (recipe.mode == ScalingMode::Current) {
    scale = current_scale(current_amax, format, recipe.scale_options);
  } else if (recipe.lag == ScalingLag::Te) {
    scale = delayed_scale(amax_history.amax(recipe.amax_algorithm), scale, format, recipe.scale_options);
  }
  // Keras lag: the stored scale, computed by the previous record_amax.
  return scale;
}

void ScalingState::record_amax(float amax, const Fp8Recipe& recipe, Fp8Format format) {
  if (recipe.mode == ScalingMode::Delayed && recipe.lag == ScalingLag::Keras) {
    // Keras computes the next scale from the history *before* this step's amax enters it.
    keras_multiplier = keras_scale_multiplier(amax_history.amax(recipe.amax_algorithm), keras_multiplier, format,
                                              recipe.scale_options);
    scale = 1.0f / keras_multiplier;
  }
  amax_history.push(amax, recipe.skip_zero_amax);
}

float ScalingState::scale_inv(const Fp8Recipe& recipe) const {
  if (recipe.mode == ScalingMode::Delayed && recipe.lag == ScalingLag::Keras) return keras_multiplier;
  return 1.0f / scale;
}

float quantize_for_step(const ScalingState& state, const Fp8Recipe& recipe, std::span<const float> x,
                        Fp8Format format, std::span<uint8_t> out) {
  if (recipe.mode == ScalingMode::Delayed && recipe.lag == ScalingLag::Keras) {
    return quantize_fp8_divide(x, state.keras_multiplier, format, out);
  }
  return quantize_fp8(x, state.scale, format, out);
}

}  // namespace fp8kit
