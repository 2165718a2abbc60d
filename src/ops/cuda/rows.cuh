// Helpers of the kernels that take a row per block (RMSNorm, cross-entropy, the gradient norm):
// vector loads of a row, and sums over a warp or the block in a fixed tree (the same bits every run).
#pragma once

#include <cuda_runtime.h>

namespace fp8kit::cuda {

// V consecutive floats, loaded and stored as one vector (V = 4: 16-byte aligned).
template <int V>
struct alignas(4 * V) Floats {
  float v[V];
};

template <typename T>
__device__ __forceinline__ T warp_sum(T v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, o);
  return v;
}

// The sum of v over the block (blockDim.x a multiple of 32, at most 1024), returned to every thread.
// Every thread of the block must call it; it may be called again right after (it synchronises before
// reusing its shared memory).
template <typename T>
__device__ __forceinline__ T block_sum(T v) {
  __shared__ T partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = warp_sum(v);
  __syncthreads();  // an earlier call's readers are done with partial
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  T sum = 0;
  for (int w = 0; w < warps; ++w) sum += partial[w];
  return sum;
}

// Threads per block for a row of n items (a multiple of 32 in [32, max_threads]).
inline int row_threads(int64_t n, int max_threads) {
  const int64_t t = (n + 31) / 32 * 32;
  return static_cast<int>(t < 32 ? 32 : t > max_threads ? max_threads : t);
}

}  // namespace fp8kit::cuda
