// Sums of rows in a fixed order, for deterministic gradients that match the CPU reference bit for bit
// (bias, LayerNorm's gamma and beta, embeddings): no atomics, the additions in the CPU's order.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/round.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {

// A block of kOrderedSumThreads threads takes 32 columns. Warps 1-8 fetch the next rows into shared
// memory while warp 0 (lane = column) adds the current ones one after the other, so that the
// sequential chain runs at the adder's latency rather than memory's.
constexpr int kOrderedSumWarps = 9;
constexpr int kOrderedSumThreads = 32 * kOrderedSumWarps;

// acc[t] (meaningful in warp 0) = add(... add(add(0, row begin), row begin + 1) ..., row end - 1), for
// Terms values per row; `valid`: whether this lane's column exists. load(j, raw) sets raw[0..Raw) of
// row j in [begin, end) for this lane's column (clamped by the caller to an existing one); it is also
// called for padding (a round's rows past the end repeat row end - 1; invalid lanes), whose values are
// then dropped. It should only load, without branches (no conditions on the values, no divisions):
// then a round's loads all get issued at once, whereas a branch would make each row's loads wait for
// the previous row's. prepare(j, raw, e) turns a real row's raw values into its Terms values e once
// they have arrived (a round later); it may branch and have side effects (writing e out). add(acc, e)
// adds one row. Every thread of the block must call this with the same begin and end (it synchronises
// the block).
template <int Terms, int Raw, typename Load, typename Prepare, typename Add>
__device__ __forceinline__ void ordered_sum_prepared(int64_t begin, int64_t end, bool valid, Load load,
                                                     Prepare prepare, Add add, float (&acc)[Terms]) {
  constexpr int kFetchWarps = kOrderedSumWarps - 1;
  constexpr int kRows = 128 / Terms;  // rows per round: 2 buffers x 16 KiB
  constexpr int kRowsPerWarp = kRows / kFetchWarps;
  __shared__ float tile[2][kRows][Terms][32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  float v[kRowsPerWarp][Raw];
  const auto row = [&](int64_t first, int k) { return first + (warp - 1) + kFetchWarps * k; };
  const auto fetch = [&](int64_t first) {
#pragma unroll
    for (int k = 0; k < kRowsPerWarp; ++k) {
      const int64_t j = row(first, k);
      load(j < end ? j : end - 1, v[k]);
    }
  };
  const auto stage = [&](int buffer, int64_t first) {
#pragma unroll
    for (int k = 0; k < kRowsPerWarp; ++k) {
      const int64_t j = row(first, k);
      float e[Terms] = {};
      if (valid && j < end) prepare(j, v[k], e);
#pragma unroll
      for (int t = 0; t < Terms; ++t) tile[buffer][(warp - 1) + kFetchWarps * k][t][lane] = e[t];
    }
  };

#pragma unroll
  for (int t = 0; t < Terms; ++t) acc[t] = 0.0f;
  // Round r is fetched into registers during round r - 2 (rounds 0 and 1 before the loop), staged into
  // buffer r % 2 during round r - 1 and added during round r: its loads have a whole round to arrive.
  const int64_t rounds = (end - begin + kRows - 1) / kRows;
  if (warp > 0 && rounds > 0) {
    fetch(begin);
    stage(0, begin);
    if (rounds > 1) fetch(begin + kRows);
  }
  __syncthreads();
  for (int64_t round = 0; round < rounds; ++round) {
    if (warp > 0) {
      if (round + 1 < rounds) {
        stage((round + 1) & 1, begin + (round + 1) * kRows);
        if (round + 2 < rounds) fetch(begin + (round + 2) * kRows);
      }
    } else {
      const int n = static_cast<int>(end - begin - round * kRows < kRows ? end - begin - round * kRows : kRows);
      const float(*rows)[Terms][32] = tile[round & 1];
#pragma unroll 8
      for (int i = 0; i < n; ++i) {
        float e[Terms];
#pragma unroll
        for (int t = 0; t < Terms; ++t) e[t] = rows[i][t][lane];
        add(acc, e);
      }
    }
    __syncthreads();
  }
}

// ordered_sum_prepared whose loads are the values to add.
template <int Terms, typename Load, typename Add>
__device__ __forceinline__ void ordered_sum(int64_t begin, int64_t end, bool valid, Load load, Add add,
                                            float (&acc)[Terms]) {
  ordered_sum_prepared<Terms, Terms>(
      begin, end, valid, load,
      [](int64_t, const float(&raw)[Terms], float(&e)[Terms]) {
#pragma unroll
        for (int t = 0; t < Terms; ++t) e[t] = raw[t];
      },
      add, acc);
}

// Rows cut into pieces of a fixed number of rows (the CPU's partial sums): pieces for `rows` rows.
inline int64_t piece_count(int64_t rows, int64_t piece_rows) { return (rows + piece_rows - 1) / piece_rows; }

// Terms output arrays of cols floats each.
template <int Terms>
struct PieceOutputs {
  float* out[Terms];
};

namespace detail {
template <int Terms>
__global__ void add_pieces_kernel(int64_t pieces, int64_t cols, const float* partials, PieceOutputs<Terms> out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= Terms * cols) return;
  const int64_t t = i / cols, col = i % cols;
  float sum = 0.0f;
#pragma unroll 8
  for (int64_t p = 0; p < pieces; ++p) sum += partials[(p * Terms + t) * cols + col];
  float* dst = out.out[0];
#pragma unroll
  for (int k = 1; k < Terms; ++k)
    if (t == k) dst = out.out[k];  // (not out.out[t]: a dynamic index would copy out to local memory)
  dst[col] = sum;
}
}  // namespace detail

// out.out[t][col] = the pieces' partial sums partials [pieces, Terms, cols] added in piece order from 0
// (the CPU's last step).
template <int Terms>
void add_pieces(int64_t pieces, int64_t cols, const float* partials, PieceOutputs<Terms> out,
                cudaStream_t stream) {
  constexpr int kThreads = 128;
  if (cols == 0) return;
  detail::add_pieces_kernel<Terms><<<blocks_for(Terms * cols, kThreads), kThreads, 0, stream>>>(pieces, cols, partials,
                                                                                                out);
  check_launch("add_pieces");
}

}  // namespace fp8kit::cuda
