// The fixed order of a deterministic sum over rows (no atomics, no dependence on thread counts),
// which a CPU layer and the GPU op that mirrors it share so both give the same bits. The layer owns
// its order (e.g. ops::LinearOp::kBiasGradientOrder); the op takes it as a parameter.
#pragma once

#include <cstdint>

namespace fp8kit::ops {

// Pieces of rows_per_piece consecutive rows, each summed row by row from 0.0f, then the pieces'
// sums added in piece order from 0.0f.
struct PieceOrder {
  int64_t rows_per_piece = 0;
  int64_t pieces(int64_t rows) const { return (rows + rows_per_piece - 1) / rows_per_piece; }
};

}  // namespace fp8kit::ops
