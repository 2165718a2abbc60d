// FP8 training recipes and the per-tensor scaling state they drive: which scale each step quantizes
// with (delayed with a one-step "te" or two-step "keras" lag, or current), and how amaxes are recorded;
// or block scaling, whose scales are all current and per block (nothing persists between steps).
#pragma once

#include "numerics/amax_history.h"
#include "numerics/format.h"
#include "numerics/scale.h"

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace fp8kit {

// Delayed and Current: one scale per tensor. Block: DeepSeek-V3's and Transformer Engine's
// Float8BlockScaling: activations and gradients quantized 1 x 128 along the GEMM's K (each group's own
// current scale), weights 128 x 128 (ops/linear.h, LinearPrecision::Fp8Block); the formats are the
// recipe's as for the other modes (TE's Float8BlockScaling default, E4M3 for all, is "--formats e4m3";
// "hybrid" gives E5M2 gradients), and lag, amax history and algorithm do not apply.
enum class ScalingMode { Delayed, Current, Block };
// Which amaxes the scale of step t comes from (delayed scaling only).
//   Te:    scale_t = f(amax_0..amax_{t-1}); step 0 uses 1.0 (TE, Flax).
//   Keras: step t uses the stored scale, computed after step t-1 from amax_0..amax_{t-2};
//          steps 0 and 1 use 1.0 (Keras 3 `quantize("float8")`).
enum class ScalingLag { Te, Keras };

struct Fp8Recipe {
  ScalingMode mode = ScalingMode::Delayed;
  ScalingLag lag = ScalingLag::Te;
  size_t amax_history_length = 1024;
  AmaxAlgorithm amax_algorithm = AmaxAlgorithm::Max;
  ScaleOptions scale_options{};
  bool skip_zero_amax = false;                 // TE skips the history roll on amax == 0
  Fp8Format forward_format = Fp8Format::E4M3;  // inputs and weights
  Fp8Format backward_format = Fp8Format::E5M2;  // output gradients
};

ScalingMode parse_scaling_mode(std::string_view text);  // "delayed" | "current" | "block"
ScalingLag parse_scaling_lag(std::string_view text);    // "te" | "keras"
AmaxAlgorithm parse_amax_algorithm(std::string_view text);  // "max" | "most_recent"
// Sets forward_format and backward_format from Transformer Engine's format names: "hybrid" (E4M3
// forward, E5M2 backward) or "e4m3" (E4M3 for both). "e5m2" is refused: its GEMMs would multiply
// E5M2 by E5M2, which FP8 tensor cores (Hopper) do not run.
void set_fp8_formats(Fp8Recipe& recipe, std::string_view text);
// One line naming every field: "delayed scaling, te lag, amax history 1024, max amax, E4M3 forward,
// E5M2 backward" (checkpoints record it; fields added after the first checkpoints -- margin,
// power-of-two scales, skip zero amax -- appear only when not the default, so those still resume).
// Block scaling names only what applies: "block scaling (1x128 activations and gradients, 128x128
// weights), E4M3 forward, E5M2 backward" (and the margin, power-of-two scales).
std::string describe(const Fp8Recipe& recipe);

// The scaling state of one FP8-quantized tensor (a Linear's input, weight or output gradient).
// Keras lag is bit-faithful to Keras only when quantizing with quantize_for_step below: Keras stores a
// dequantization multiplier m and quantizes x / m, which can differ in the last bit from x * (1 / m).
// The state keeps m in `keras_multiplier` and `scale` = 1 / m as the TE-convention equivalent.
struct ScalingState {
  float scale = 1.0f;  // TE convention: multiplies before the cast; saved as a named tensor
  float keras_multiplier = 1.0f;  // Keras lag only: Keras's stored "scale" (x ~= float(q) * m)
  AmaxHistory amax_history;

  explicit ScalingState(size_t history_length = 1024) : amax_history(history_length) {}

  // The scale to quantize this step's tensor with. For current scaling pass the tensor's own amax
  // (delayed scaling ignores it). Te lag: recomputes `scale` from the history first.
  float scale_for_step(const Fp8Recipe& recipe, Fp8Format format, float current_amax = 0.0f);
  // After quantizing: record this step's amax. Keras lag: first recomputes the stored `scale` from
  // the history as it was (so the new amax reaches the scale one step later).
  void record_amax(float amax, const Fp8Recipe& recipe, Fp8Format format);

  // The dequantization factor for data quantized with this step's scale: keras_multiplier in Keras
  // lag, 1 / scale otherwise.
  float scale_inv(const Fp8Recipe& recipe) const;
};

// Quantizes this step's tensor as the recipe's framework does, with the scale scale_for_step set:
// fp8(x * scale) (te lag, current scaling) or fp8(x / keras_multiplier) (keras lag), saturating.
// Returns amax of x (for record_amax); keep state.scale_inv(recipe) with the data.
float quantize_for_step(const ScalingState& state, const Fp8Recipe& recipe, std::span<const float> x,
                        Fp8Format format, std::span<uint8_t> out);

}  // namespace fp8kit
