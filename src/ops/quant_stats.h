// Quantization statistics of one FP8 cast (the health report's measurements): how many values of a
// tensor saturate, flush to zero or land among the subnormals when cast with a given scale, and the
// cast's signal-to-noise ratio, reduced on the device into a small record (no host sync per tensor).
#pragma once

#include "numerics/format.h"
#include "ops/context.h"
#include "tensor/tensor.h"

#include <cstdint>
#include <optional>
#include <span>

namespace fp8kit::ops {

// The device record (kQuantStatsWords I32 words, 8-byte aligned), the same layout on both devices.
struct QuantStatsRecord {
  uint64_t count;        // elements
  uint64_t nonfinite;    // NaN or +-inf inputs (left out of the counts and sums below)
  uint64_t saturated;    // finite x with |x * scale| > fp8_max: clamped to the format's max
  uint64_t flushed;      // x != 0 whose code is zero: underflow
  uint64_t subnormal;    // codes among the format's subnormals (nonzero, below its smallest normal)
  double sum_squares;    // sum x^2
  double error_squares;  // sum (x - dequant(quant(x)))^2, dequant = code / scale
  float amax;            // max |x| (NaN ignored, inf counted), as the cast records it
  float scale;           // the cast's scale: q = fp8(x * scale) (keras lag: 1 / multiplier)
  float history_amax;    // the max of the slot's amax history at the cast (0 without one)
  uint32_t padding;
};
inline constexpr int64_t kQuantStatsWords = sizeof(QuantStatsRecord) / sizeof(int32_t);
static_assert(sizeof(QuantStatsRecord) == 72 && kQuantStatsWords == 18);
// The GPU's per-block partial records (a deterministic reduction: blocks in a fixed order, no float
// atomics); the CPU does not use them.
inline constexpr int64_t kQuantStatsParts = 256;  // two blocks of 512 threads per SM of an H100

// How x is cast: q = fp8(x * *scale) saturating, or with divide (Keras's lag) q = fp8(x / *scale),
// exactly as ops::ScalingTable::cast_scale / divide(slot) give it. Pointers on the context's device.
struct QuantStatsSpec {
  Fp8Format format = Fp8Format::E4M3;
  const float* scale = nullptr;
  bool divide = false;
  const float* history = nullptr;  // the slot's amax history (history_length floats) or null
  int64_t history_length = 0;
};

// Writes the statistics of casting x (f32, any shape, on the context's device) into `record`
// ([kQuantStatsWords] i32 on the device); `partials` ([kQuantStatsParts * kQuantStatsWords] i32) is the
// GPU's scratch. Reads x and the scale only: the cast itself is untouched. Counts are exact and the
// same on both devices; the sums are in double, in a fixed order per device (the CPU's sequential).
void quant_stats(Context& c, const Tensor& x, const QuantStatsSpec& spec, Tensor& record, Tensor& partials);

// A record read back on the host, and what the report shows of it.
struct QuantStats {
  QuantStatsRecord raw;
  double saturated_fraction() const;
  double underflow_fraction() const;  // flushed + subnormal
  double flushed_fraction() const;
  double subnormal_fraction() const;
  double nonfinite_fraction() const;
  // 10 log10(sum x^2 / sum err^2); none for an all-zero tensor; +inf for an exact cast.
  std::optional<double> snr_db() const;
};
QuantStats decode_quant_stats(std::span<const int32_t> words);

namespace cpu {
// The reference on host memory (one float each for scale, history as spec; pointers on the host).
QuantStatsRecord quant_stats(std::span<const float> x, const QuantStatsSpec& spec);
}  // namespace cpu

}  // namespace fp8kit::ops
