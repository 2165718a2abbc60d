// Calibration statistics of an activation (a GEMM's input): each channel's amax and the histogram of
// magnitudes, accumulated over the calibration batches on either device, the same results on both.
#pragma once

#include "ops/context.h"
#include "tensor/tensor.h"

namespace fp8kit::ops {

// The bins: numerics/histogram.h (kHistogramBins, histogram_bin, histogram_bin_upper).
// x [rows, cols] bf16 or f32. channel_amax [cols] f32 = max(channel_amax, max over rows of |x|) (NaN
// ignored; inf counted); histogram (null: none) [kHistogramBins] i32 += the counts of |x| per bin (NaN
// skipped). Both accumulate across calls (the caller zeroes them first, and drains the i32 counts to
// the host before 2^31). Deterministic: same results on both devices.
void accumulate_activation_stats(Context& c, const Tensor& x, Tensor& channel_amax, Tensor* histogram);

}  // namespace fp8kit::ops
