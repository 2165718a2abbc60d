// Device side of ActivationOutArgs for the row kernels (a row's results kept in registers): each
// thread holds `Chunks` vectors of V bf16 results, the row's threads reduce their amax when the output
// is fp8, and store bf16 values or E4M3 codes made exactly as ops::quantize makes them (encode_row,
// numerics' current_scale). A row's threads are one block, or at few rows a cluster of blocks.
// Included by the .cu kernels only.
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <type_traits>
#include <utility>

#include "numerics/format.h"
#include "ops/cuda/activation_out.h"
#include "ops/cuda/fp8_cast.cuh"
#include "ops/cuda/rows.cuh"
#include "ops/cuda/scale.cuh"
#include "runtime/cuda/check.h"
#include "runtime/cuda/dependent_launch.cuh"

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

// At few rows a block per row would leave most SMs idle and put a row's whole arithmetic on one SM:
// below kFewRows rows (an H100 has 132 SMs), a cluster of kRowBlocks blocks shares each row.
constexpr int64_t kFewRows = 128;
constexpr int kRowBlocks = 8;  // the largest portable cluster

// A thread's place in its row: Blocks consecutive blocks (a cluster when Blocks > 1) share row
// blockIdx.x / Blocks; the row's thread `index` (of `count`) holds the row's vectors index,
// index + count, ... (Blocks = 1: threadIdx.x of blockDim.x, a block per row).
struct RowThread {
  int64_t row, index, count;
};

template <int Blocks>
__device__ __forceinline__ RowThread row_thread() {
  return {blockIdx.x / Blocks, static_cast<int64_t>(blockIdx.x % Blocks) * blockDim.x + threadIdx.x,
          int64_t{Blocks} * blockDim.x};
}

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

// The sum of v over the row's threads (at most 1024), in every thread, with block_sum's bits for one
// block of that many threads: each warp's shuffle tree, then the warps' sums in order from 0. Every
// thread of the row calls it. Blocks > 1: at most once per kernel, which ends with row_done.
template <int Blocks>
__device__ __forceinline__ float row_sum(float v) {
  if constexpr (Blocks == 1) {
    return block_sum(v);
  } else {
    __shared__ float partial[32 / Blocks];
    const auto cluster = cooperative_groups::this_cluster();
    const int lane = threadIdx.x % 32, warps = blockDim.x / 32, all = Blocks * warps;
    v = warp_sum(v);
    if (lane == 0) partial[threadIdx.x / 32] = v;
    cluster.sync();
    // Lane w reads the row's warp w's sum (block w / warps's warp w % warps); all loads in flight at once.
    const float mine = lane < all ? *cluster.map_shared_rank(partial + lane % warps, lane / warps) : 0.0f;
    float sum = 0.0f;
    for (int w = 0; w < all; ++w) sum += __shfl_sync(0xFFFFFFFFu, mine, w);
    return sum;
  }
}

// The largest of v over the row's threads, in every thread. Every thread of the row calls it. Blocks
// > 1: at most once per kernel, which ends with row_done.
template <int Blocks>
__device__ __forceinline__ uint32_t row_max(uint32_t v) {
  v = block_max(v);
  if constexpr (Blocks > 1) {
    __shared__ uint32_t block_amax;
    const auto cluster = cooperative_groups::this_cluster();
    const int lane = threadIdx.x % 32;
    if (threadIdx.x == 0) block_amax = v;
    cluster.sync();
    v = __reduce_max_sync(0xFFFFFFFFu, lane < Blocks ? *cluster.map_shared_rank(&block_amax, lane) : 0u);
  }
  return v;
}

// The last call of a row kernel that called row_sum or row_max (activation_scale per row): with
// Blocks > 1, a block's shared memory must outlive the cluster's reads of it.
template <int Blocks>
__device__ __forceinline__ void row_done() {
  if constexpr (Blocks > 1) cooperative_groups::this_cluster().sync();
}

// max(amax, |y|) as ordered bits (NaN ignored, inf counted).
template <int V>
__device__ __forceinline__ uint32_t raise_amax(uint32_t amax, const Bf16s<V>& y) {
#pragma unroll
  for (int i = 0; i < V; ++i) amax = max(amax, amax_bits(static_cast<uint32_t>(y.h[i]) << 16));
  return amax;
}

// Per tensor, the quantization multiplier *out.scale (else 1), read at a kernel's start so that its
// load overlaps the row's.
__device__ __forceinline__ float tensor_scale(const ActivationOutArgs& out) {
  return out.kind == OutKind::PerTensor ? *out.scale : 1.0f;
}

// The scale row t.row's codes are made with (bf16 output: 1, nothing reduced). Every thread of the
// row calls it with the amax of its own results (and tensor_scale(out)). Per row: numerics'
// current_scale of the row's amax, recorded with its scale_inv; per tensor: `scale`, the tensor's
// amax raised and (row 0) scale_inv = 1 / scale, as quantize_fp8 does.
template <int Blocks>
__device__ __forceinline__ float activation_scale(const ActivationOutArgs& out, const RowThread& t, uint32_t amax,
                                                  float scale) {
  if (out.kind == OutKind::Bf16) return 1.0f;
  if (out.kind == OutKind::PerTensor) {
    if (out.amax != nullptr) {  // (null: not recorded)
      amax = block_max(amax);   // the tensor's amax is raised block by block
      if (threadIdx.x == 0 && amax > 0) atomicMax(reinterpret_cast<unsigned int*>(out.amax), amax);
    }
    if (t.row == 0 && t.index == 0) *out.scale_inv = __fdiv_rn(1.0f, scale);
    return scale;
  }
  const float a = __uint_as_float(row_max<Blocks>(amax));
  scale = current_scale(a, out.fp8_max, out.margin, out.power_of_two);
  if (t.index == 0) {
    out.scale_inv[t.row] = __fdiv_rn(1.0f, scale);
    out.amax[t.row] = a;
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

// Launches a row kernel for `rows` rows of `cols` results: launch(V, Chunks, Blocks, threads) with V,
// Chunks and Blocks as std::integral_constant, Blocks blocks of `threads` threads per row (launch them
// with launch_rows). vector: 8 bf16 per vector (cols a multiple of 8, every row pointer 16-byte
// aligned), the fewest chunks that hold the row; else one value per vector. A block per row of up to
// kRowKernelThreads threads; below kFewRows rows of vectors, kRowBlocks blocks (a cluster) share a
// row's row_threads(cols / 8, few_row_threads) threads (at most 1024) where they divide evenly.
// few_row_threads = kRowKernelThreads keeps a row's threads, their vectors and so row_sum's bits.
// cols <= kRowKernelMaxCols.
template <typename Launch>
void launch_row_kernel(int64_t rows, int64_t cols, bool vector, int few_row_threads, Launch&& launch) {
  using std::integral_constant;
  if (!vector) {
    launch(integral_constant<int, 1>{}, integral_constant<int, kRowKernelValues>{}, integral_constant<int, 1>{},
           row_threads(cols, kRowKernelThreads));
    return;
  }
  const int64_t vectors = cols / 8;
  const int few_threads = row_threads(vectors, few_row_threads);
  const bool spread = rows < kFewRows && few_threads % (32 * kRowBlocks) == 0;
  const int threads = spread ? few_threads : row_threads(vectors, kRowKernelThreads);
  const int64_t chunks = (vectors + threads - 1) / threads;
  const auto with_blocks = [&](auto blocks) {
    const int block_threads = threads / decltype(blocks)::value;
    if (chunks <= 1) {
      launch(integral_constant<int, 8>{}, integral_constant<int, 1>{}, blocks, block_threads);
    } else if (chunks <= 2) {
      launch(integral_constant<int, 8>{}, integral_constant<int, 2>{}, blocks, block_threads);
    } else if (chunks <= 4) {
      launch(integral_constant<int, 8>{}, integral_constant<int, 4>{}, blocks, block_threads);
    } else {
      launch(integral_constant<int, 8>{}, integral_constant<int, kRowKernelValues / 8>{}, blocks, block_threads);
    }
  };
  if (spread) {
    with_blocks(integral_constant<int, kRowBlocks>{});
  } else {
    with_blocks(integral_constant<int, 1>{});
  }
}

// Queues kernel(args...) on `stream` over `rows` rows of `blocks` blocks of `threads` threads, the
// blocks of a row one cluster when blocks > 1, as a dependent launch (the kernel starts with
// wait_for_prior_grids(), runtime/cuda/dependent_launch.cuh).
template <typename... Params, typename... Args>
void launch_rows(void (*kernel)(Params...), int64_t rows, int blocks, int threads, cudaStream_t stream,
                 Args&&... args) {
  launch_dependent(kernel, dim3(static_cast<unsigned>(rows * blocks)), dim3(static_cast<unsigned>(threads)), 0,
                   stream, static_cast<unsigned>(blocks), std::forward<Args>(args)...);
}

}  // namespace fp8kit::cuda
