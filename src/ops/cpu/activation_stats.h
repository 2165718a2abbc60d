// Calibration statistics' CPU core (ops/activation_stats.h): per-channel amax and the magnitude
// histogram of x [rows, cols], accumulated. Maxima and integer counts: the result does not depend on
// the order (threads, devices).
#pragma once

#include <cstdint>

namespace fp8kit::ops::cpu {

// channel_amax [cols] = max(channel_amax, max over rows of |x|) (NaN ignored, inf counted); histogram
// (null: none) [kHistogramBins] += the counts of |x| per numerics/histogram.h's bin (NaN skipped).
void accumulate_activation_stats(int64_t rows, int64_t cols, const float* x, float* channel_amax, int32_t* histogram);
// The same of bf16 x (raw 16-bit patterns).
void accumulate_activation_stats(int64_t rows, int64_t cols, const uint16_t* x, float* channel_amax,
                                 int32_t* histogram);

}  // namespace fp8kit::ops::cpu
