// Quantization statistics on the GPU (ops/quant_stats.h's semantics). Device pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/linear_epilogue.h"
#include "ops/quant_stats.h"

namespace fp8kit::cuda {

// The record of x [n] f32 cast as `spec` says, into record (ops::kQuantStatsWords words), through
// partials (ops::kQuantStatsParts records). With an active gradient, x is a Linear's output gradient
// dy [n / cols, cols] and the statistics are of gradient(dy), the values its FP8 cast quantizes.
// Two launches: up to kQuantStatsParts blocks each reduce a strided share into its partial record,
// then one block adds the partials in block order (deterministic, no float atomics).
void quant_stats(const float* x, int64_t n, const ops::QuantStatsSpec& spec, const EpilogueGradient& gradient,
                 int32_t* record, int32_t* partials, cudaStream_t stream, int64_t cols = 1);

}  // namespace fp8kit::cuda
