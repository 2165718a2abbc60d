// Calibration statistics on the GPU (ops/activation_stats.h's semantics): per-channel amax and the
// magnitude histogram of x, accumulated. Device pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/tensor.h"

namespace fp8kit::cuda {

// x [rows, cols] f32 or bf16 (x_type). channel_amax [cols] = max(channel_amax, max over rows of |x|)
// (NaN ignored, inf counted; channel_amax must hold values >= 0); histogram [kHistogramBins] (null:
// none) += the counts per numerics/histogram.h's bin. One pass: blocks of 64 rows x 256 threads' columns,
// each thread a 16-byte vector of columns (where cols allows), a block's histogram in shared memory,
// then atomics (maxima and integer counts: the same results whatever the order).
void accumulate_activation_stats(int64_t rows, int64_t cols, const void* x, DType x_type, float* channel_amax,
                                 int32_t* histogram, cudaStream_t stream);

}  // namespace fp8kit::cuda
