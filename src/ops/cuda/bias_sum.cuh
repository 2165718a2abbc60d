// A bias gradient summed inside the cast of its output gradient (linear_epilogue.h's BiasSum), on the
// device: a block walks one piece's tiles of kBiasSumTileRows rows in order, stages each tile's
// gradient values in shared memory, and thread c adds column c of it row by row to a running sum: the
// piece's sum in PieceOrder, as bias_backward makes it. The pieces' sums are then added in order
// (add_pieces), or, with one piece, the block writes the bias gradient itself.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/elementwise.h"
#include "ops/cuda/linear_epilogue.h"
#include "ops/cuda/ordered_sum.cuh"

namespace fp8kit::cuda {

constexpr int kBiasSumTileCols = 64;  // a cast tile's columns: one summing thread each

// A cast's BiasSum as its kernel takes it.
struct BiasSumArgs {
  float* out = nullptr;      // null: no sums; partial sums [pieces, cols], or with one piece the gradient
  int64_t piece_tiles = 1;   // tiles per piece
  bool last = false;         // one piece: out is the bias gradient (add_pieces' 0 + sum)
};

// One tile's values, rows by columns.
struct BiasSumTile {
  float v[kBiasSumTileRows][kBiasSumTileCols];
};

// Values of row `row`, columns col .. col + 3 of the tile (col a multiple of 4).
__device__ __forceinline__ void put4(BiasSumTile& t, int row, int col, const float v[4]) {
  *reinterpret_cast<float4*>(&t.v[row][col]) = make_float4(v[0], v[1], v[2], v[3]);
}

// sum += column threadIdx.x (< kBiasSumTileCols) of the tile's first `rows` rows, one row after the
// other; the block must have synchronised since the tile was written, and again before it is rewritten.
__device__ __forceinline__ void add_rows(const BiasSumTile& t, int64_t rows, float& sum) {
  if (threadIdx.x >= kBiasSumTileCols) return;
  const int n = rows < kBiasSumTileRows ? static_cast<int>(rows) : static_cast<int>(kBiasSumTileRows);
#pragma unroll 16
  for (int r = 0; r < n; ++r) sum += t.v[r][threadIdx.x];
}

// The block's sum of piece `piece` at column col0 + threadIdx.x.
__device__ __forceinline__ void store_sum(const BiasSumArgs& s, int64_t piece, int64_t cols, int64_t col0, float sum) {
  const int64_t col = col0 + threadIdx.x;
  if (s.out == nullptr || threadIdx.x >= kBiasSumTileCols || col >= cols) return;
  if (s.last) {
    s.out[col] = __fadd_rn(0.0f, sum);
  } else {
    s.out[piece * cols + col] = sum;
  }
}

// Piece `piece` of column tile `col_tile` of a [rows, cols] gradient: cast_tile(t, &tile) casts the
// piece's tiles t in row order, putting their values into tile and ending synchronised after the
// puts; thread c adds column c of each as it goes, and the piece's sums are stored.
template <typename CastTile>
__device__ __forceinline__ void sum_piece(const BiasSumArgs& s, int64_t rows, int64_t cols, int64_t col_tile,
                                          int64_t piece, CastTile cast_tile) {
  __shared__ __align__(16) BiasSumTile tile;
  float sum = 0.0f;
  const int64_t first = piece * s.piece_tiles;
  for (int64_t t = first; t < first + s.piece_tiles && t * kBiasSumTileRows < rows; ++t) {
    cast_tile(t, &tile);
    add_rows(tile, rows - t * kBiasSumTileRows, sum);
    __syncthreads();  // the tile (and the cast's shared memory) read before the next tile writes them
  }
  store_sum(s, piece, cols, col_tile * kBiasSumTileCols, sum);
}

// Host: whether a cast of a [rows, cols] gradient can sum s in its own tiles (the cast's tile must
// take it too).
inline bool tile_sums(const BiasSum& s, int64_t rows, int64_t cols) {
  return s.grad != nullptr && rows > 0 && cast_sums_bias(rows, cols, s.order);
}

// Host: the kernel form of s for a [rows, cols] gradient whose tiles sum it (tile_sums).
inline BiasSumArgs bias_sum_args(const BiasSum& s, int64_t rows) {
  const int64_t pieces = s.order.pieces(rows);
  return {pieces == 1 ? s.grad : s.workspace, s.order.rows_per_piece / kBiasSumTileRows, pieces == 1};
}

// Host, after the cast of dy (gradient) with bias sum s: where its tiles summed it, the pieces' sums
// added in order into s.grad (nothing to add with one piece); otherwise the whole sum by
// bias_backward's own pass.
inline void finish_bias_sum(const BiasSum& s, bool tiles_summed, const float* dy, const EpilogueGradient& gradient,
                            int64_t rows, int64_t cols, cudaStream_t stream) {
  if (s.grad == nullptr) return;
  if (!tiles_summed) {
    const BiasBackward b{dy, gradient, nullptr, s.grad};
    bias_backward({&b, 1}, rows, cols, s.order, s.workspace, stream);
  } else if (const int64_t pieces = s.order.pieces(rows); pieces > 1) {
    add_pieces<1>(pieces, cols, s.workspace, {{s.grad}}, stream);
  }
}

}  // namespace fp8kit::cuda
