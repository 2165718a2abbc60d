// FP8 quantization with one current scale per block on the GPU, bit-identical to numerics'
// quantize_blocks: per row (1 x cols), per 1 x G group along K (G = 32, 64, 128) and per 128 x 128
// block; each block's amax, scale (numerics' current_scale) and scale_inv, and the codes, in one pass
// over x. Per-tensor quantization is quantize.h's.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "numerics/format.h"
#include "numerics/scale.h"
#include "tensor/tensor.h"

namespace fp8kit::cuda {

enum class BlockKind : uint8_t {
  Row,       // 1 x cols
  Group,     // 1 x group, group 32, 64 or 128
  Tile128,   // 128 x 128
};

// All pointers are device pointers. x is [rows, cols], row-major.
struct BlockQuantizeArgs {
  const void* x = nullptr;
  DType x_type = DType::F32;  // F32 or Bf16
  int64_t rows = 0, cols = 0;
  Fp8Format format = Fp8Format::E4M3;
  BlockKind kind = BlockKind::Tile128;
  int group = 128;  // Group only
  ScaleOptions options{};
  uint8_t* q = nullptr;          // [rows, cols]
  uint8_t* q_t = nullptr;        // [cols, rows] or null; Tile128 only (its blocks' scales transpose with it)
  float* scale_inv = nullptr;    // [grid_rows, grid_cols], row-major
  float* amax = nullptr;         // [grid_rows, grid_cols], row-major
};

// Queues the quantization on `stream`. Throws fp8kit::Error for bad arguments (naming them).
void quantize_blocks(const BlockQuantizeArgs& args, cudaStream_t stream = nullptr);

// out [rows, cols] f32 = float(q[r, c]) * scale_inv[r / block_rows, c / block_cols] (the grid
// row-major), as numerics::dequantize_blocks.
void dequantize_blocks(const uint8_t* q, int64_t rows, int64_t cols, Fp8Format format, int64_t block_rows,
                       int64_t block_cols, const float* scale_inv, float* out, cudaStream_t stream = nullptr);

}  // namespace fp8kit::cuda
