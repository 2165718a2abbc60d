// The FP8 health statistics of a training run (issue 13): which steps record them, and the
// "health" event of the metrics log that holds one recording (ops/quant_stats.h per FP8 tensor).
#pragma once

#include "ops/quant_stats.h"
#include "ops/scaling_table.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <span>

namespace fp8kit::train {

// Whether 1-based step `step` of a run of `last` steps records health statistics: every `every` steps
// and the last (so that a run shorter than `every` records one), none when `every` is 0.
inline bool records_health(int64_t every, int64_t step, int64_t last) {
  return every > 0 && (step % every == 0 || step == last);
}

// The event of one recording: {"event": "health", "recipe": ..., "scaling": {"mode", "lag",
// "amax_history", "amax_algo", "margin"}, "tensors": [slot names], and per field one array in slot
// order: "format", "count", "amax", "scale", "history_amax", "saturated", "flushed", "subnormal",
// "nonfinite" (fractions of the tensor's elements), "snr_db" (null: an all-zero tensor or an exact
// cast)}. The caller adds "precision", "step" (and "epoch").
nlohmann::json health_event(const ops::ScalingTable& table, std::span<const ops::QuantStats> stats);

}  // namespace fp8kit::train
