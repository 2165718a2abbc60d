// Device side of ActivationOutArgs for the row kernels (a block per row, the row's results kept in
// registers): each thread holds `Chunks` vectors of V bf16 results, the block reduces their amax when
// the output is fp8, and stores bf16 values or E4M3 codes made exactly as ops::quantize makes them
// (encode_row, numerics' current_scale). Included by the .cu kernels only.
#pragma once

#include <cuda_runtime.h>

#include <type_traits>

#include "numerics/format.h"
#include "ops/cuda/activation_out.h"
#include "ops/cuda/fp8_cast.cuh"
#include "ops/cuda/rows.cuh"
#include "ops/cuda/scale.cuh"

namespace fp8kit::cuda {

// V consecutive bf16 values, loaded and stored as one vector (V = 8: 16 bytes).
template <int V>
struct alignas(2 * V) Bf16s {
  uint16_t h[V];
};

// The row kernels' block size and the results a thread keeps: rows up to 512 x 64 = 32768 columns.
constexpr int kRowKernelThreads = 512;
constexpr int kRowKernelValues = 64;
constexpr int64_t kRowKernelMaxCols = int64_t{kRowKernelThreads} * kRowKernelValues;

// The largest of v over the block, in every thread (blockDim.x a multiple of 32). Every thread calls it.
__device__ __forceinline__ uint32_t block_max(uint32_t v) {
  __shared__ uint32_t partial[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  v = __reduce_max_sync(0xFFFFFFFFu, v);
  __syncthreads();  // an earlier call's readers are done with partial
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  uint32_t m = 0;
  for (int w = 0; w < warps; ++w) m = max(m, partial[w]);
  return m;
}

// max(amax, |y|) as ordered bits (NaN ignored, inf counted).
template <int V>
__device__ __forceinline__ uint32_t raise_amax(uint32_t amax, const Bf16s<V>& y) {
#pragma unroll
  for (int i = 0; i < V; ++i) amax = max(amax, amax_bits(static_cast<uint32_t>(y.h[i]) << 16));
  return amax;
}

// The scale row `row`'s codes are made with (bf16 output: 1, nothing reduced). Every thread of the
// block calls it with the amax of its own results. Per row: numerics' current_scale of the row's
// amax, recorded with its scale_inv; per tensor: *out.scale, the tensor's amax raised and (row 0)
// scale_inv = 1 / scale, as quantize_fp8 does.
__device__ __forceinline__ float activation_scale(const ActivationOutArgs& out, int64_t row, uint32_t amax) {
  if (out.kind == OutKind::Bf16) return 1.0f;
  amax = block_max(amax);
  const float a = __uint_as_float(amax);
  if (out.kind == OutKind::PerTensor) {
    const float scale = *out.scale;
    if (threadIdx.x == 0) {
      if (amax > 0) atomicMax(reinterpret_cast<unsigned int*>(out.amax), amax);
      if (row == 0) *out.scale_inv = __fdiv_rn(1.0f, scale);
    }
    return scale;
  }
  const float scale = usable_amax(a) ? scale_from_amax(a, out.fp8_max, out.margin, out.power_of_two) : 1.0f;
  if (threadIdx.x == 0) {
    out.scale_inv[row] = __fdiv_rn(1.0f, scale);
    out.amax[row] = a;
  }
  return scale;
}

// Stores y, the results at element `offset` of the [rows, cols] output, as `out` says (V = 8: the
// bf16 output 16-byte and the codes 8-byte aligned there).
template <int V>
__device__ __forceinline__ void store_activation(const ActivationOutArgs& out, int64_t offset, const Bf16s<V>& y,
                                                 float scale) {
  if (out.kind == OutKind::Bf16) {
    *reinterpret_cast<Bf16s<V>*>(out.bf16 + offset) = y;
    return;
  }
  float v[V];
#pragma unroll
  for (int i = 0; i < V; ++i) v[i] = bf16_to_float(y.h[i]);
  uint8_t* dst = out.codes + offset;
  if constexpr (V == 8) {
    *reinterpret_cast<uint2*>(dst) = make_uint2(encode_row<Fp8Format::E4M3, false>(v, scale),
                                                encode_row<Fp8Format::E4M3, false>(v + 4, scale));
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const float one[4] = {v[i], 0.0f, 0.0f, 0.0f};
      dst[i] = static_cast<uint8_t>(encode_row<Fp8Format::E4M3, false>(one, scale));
    }
  }
}

// Launches a row kernel for rows of `cols` results: launch(V, Chunks, threads) with V and Chunks as
// std::integral_constant. vector: 8 bf16 per vector (cols a multiple of 8, every row pointer 16-byte
// aligned), the fewest chunks that hold the row; else one value per vector. cols <= kRowKernelMaxCols.
template <typename Launch>
void launch_row_kernel(int64_t cols, bool vector, Launch&& launch) {
  using std::integral_constant;
  if (!vector) {
    launch(integral_constant<int, 1>{}, integral_constant<int, kRowKernelValues>{},
           row_threads(cols, kRowKernelThreads));
    return;
  }
  const int64_t vectors = cols / 8;
  const int threads = row_threads(vectors, kRowKernelThreads);
  const int64_t chunks = (vectors + threads - 1) / threads;
  if (chunks <= 1) {
    launch(integral_constant<int, 8>{}, integral_constant<int, 1>{}, threads);
  } else if (chunks <= 2) {
    launch(integral_constant<int, 8>{}, integral_constant<int, 2>{}, threads);
  } else if (chunks <= 4) {
    launch(integral_constant<int, 8>{}, integral_constant<int, 4>{}, threads);
  } else {
    launch(integral_constant<int, 8>{}, integral_constant<int, kRowKernelValues / 8>{}, threads);
  }
}

}  // namespace fp8kit::cuda
