// Device-side bf16 rounding of a float32 value (the GPU twin of numerics/cast.h's round_bf16), for
// the kernels that mirror Keras's mixed_bfloat16 rounding points.
#pragma once

#include <algorithm>

#include "ops/cuda/fp8_cast.cuh"
#include "runtime/cuda/device_info.h"

namespace fp8kit::cuda {

__device__ __forceinline__ float round_bf16(float x) { return bf16_to_float(float_to_bf16(x)); }
__device__ __forceinline__ float maybe_bf16(float x, bool bf16) { return bf16 ? round_bf16(x) : x; }

// Blocks of `threads` covering n elements (at least one block).
inline unsigned blocks_for(int64_t n, int threads) {
  return static_cast<unsigned>(n > 0 ? (n + threads - 1) / threads : 1);
}

// The grid of a kernel that strides over n elements: blocks_for(n, threads), at most 8 per SM (more
// would only queue, and each block's prologue runs once per block).
inline unsigned strided_blocks(int64_t n, int threads) {
  const int64_t most = 8 * static_cast<int64_t>(current_device_attribute(cudaDevAttrMultiProcessorCount));
  return static_cast<unsigned>(std::min<int64_t>(blocks_for(n, threads), most));
}

}  // namespace fp8kit::cuda
