// Calibration statistics: the amax of every GEMM input (per channel, optionally with a magnitude
// histogram for percentile clipping) over a set of prompts, as the inference engine records them, and
// the safetensors file that carries them from `lm calibrate` to `lm pack`.
#pragma once

#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

namespace fp8kit::quant {

// One activation's statistics: max |x| per channel (column) over every row seen (NaN ignored), and
// optionally the counts of |x| per bin of numerics/histogram.h.
struct ActivationStats {
  std::vector<float> channel_amax;  // [channels]
  std::vector<uint64_t> histogram;  // kHistogramBins counts, or empty: not recorded

  // The largest channel amax (0 when there are no channels).
  float amax() const;
  // The magnitude below which `fraction` (in (0, 1], e.g. 0.999) of the counted values lie: the upper
  // edge of the bin where the cumulative count reaches fraction * total, capped at amax(). Without a
  // histogram (or with no counts), amax().
  float percentile(double fraction) const;
  // Adds `other`'s observations: channel-wise max, histogram counts summed. An empty stats object takes
  // other's; otherwise the channel counts must agree. A histogram survives only if both had one (a
  // histogram missing some values would understate the tail).
  void merge(const ActivationStats& other);
};

// Keys: HF module names of the GEMMs whose input was recorded ("model.layers.0.self_attn.q_proj": q, k
// and v share one input and the recorder stores it under each; "model.layers.0.mlp.down_proj", ...),
// and for the KV cache "model.layers.0.self_attn.k_cache" / ".v_cache" (channels kv_heads * head_dim:
// the keys after RoPE, the values).
struct CalibrationStats {
  std::map<std::string, ActivationStats> activations;
  int64_t prompts = 0, tokens = 0;
  std::string source;  // what was run (model, prompt file), for the record

  // Merges every activation (ActivationStats::merge) and adds the counts.
  void merge(const CalibrationStats& other);
};

// The file: one F32 tensor "<key>.channel_amax" [channels] per activation, "<key>.histogram" U64
// [kHistogramBins] where recorded, and __metadata__ {"format": kCalibrationFormat, "version": "1",
// "prompts", "tokens", "source"}. Written atomically.
inline constexpr const char* kCalibrationFormat = "fp8kit-calibration";
void save_calibration(const std::filesystem::path& path, const CalibrationStats& stats);
// Reads and validates a file of save_calibration (histograms as U64 or I64): a one-line error naming the
// file and the tensor for a wrong format tag or version, a tensor that is not an activation's, a wrong
// dtype or shape, a negative or NaN amax, a negative count, a histogram without its amax.
CalibrationStats load_calibration(const std::filesystem::path& path);

}  // namespace fp8kit::quant
