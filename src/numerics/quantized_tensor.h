// FP8 tensors with their dequantization scales, at every granularity of the spec: per tensor, per
// row (channel), per group of g along K, 1x128 tiles and 128x128 blocks. Scales are current (from each
// block's own amax, TE convention): q = fp8(x * scale), x ~= float(q) * scale_inv, scale_inv = 1 / scale.
#pragma once

#include "numerics/format.h"
#include "numerics/scale.h"

#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace fp8kit {

enum class Granularity {
  PerTensor,     // one scale
  PerRow,        // one per row: a weight's output channel, or an activation's token
  PerGroup,      // one per group_size consecutive elements of a row (along K)
  Block1x128,    // 1x128 tiles (DeepSeek-V3 activations and gradients)
  Block128x128,  // 128x128 blocks (DeepSeek-V3 weights)
};

Granularity parse_granularity(std::string_view text);  // tensor | row | group | 1x128 | 128x128
std::string_view name(Granularity granularity);

// The [rows, cols] tile one scale covers at `granularity` in a [rows, cols] matrix (PerGroup: 1 x
// group_size; PerTensor: the whole matrix, at least 1 x 1).
struct BlockShape {
  size_t rows = 0, cols = 0;
};
BlockShape block_shape(Granularity granularity, size_t rows, size_t cols, size_t group_size = 64);

// A [rows, cols] row-major matrix (K = cols) in FP8, one scale_inv per [block_rows, block_cols] block.
// Blocks at the bottom and right edges may be partial (217x256 with 128x128 blocks has 2x2 blocks,
// the lower ones 89 rows tall).
struct QuantizedTensor {
  Fp8Format format = Fp8Format::E4M3;
  Granularity granularity = Granularity::PerTensor;
  size_t rows = 0, cols = 0;
  size_t block_rows = 0, block_cols = 0;  // the tile one scale covers
  std::vector<uint8_t> data;              // [rows, cols] FP8 codes
  std::vector<float> scale_inv;           // [scale_rows(), scale_cols()], row-major

  size_t scale_rows() const { return block_rows == 0 ? 0 : (rows + block_rows - 1) / block_rows; }
  size_t scale_cols() const { return block_cols == 0 ? 0 : (cols + block_cols - 1) / block_cols; }
  float scale_inv_at(size_t row, size_t col) const { return scale_inv[(row / block_rows) * scale_cols() + col / block_cols]; }
};

// Quantizes x ([rows, cols], row-major) with one current scale per block, saturating.
// group_size is the K extent of a PerGroup block (ignored otherwise); the last group of a row may be
// shorter when cols is not a multiple. Edge cases: a block whose amax is 0 (all zeros) or not finite
// (holds +-inf) gets scale 1 (current_scale's guard): its inf saturates to +-fp8_max. NaN elements do
// not affect the scale and stay NaN.
QuantizedTensor quantize(std::span<const float> x, size_t rows, size_t cols, Fp8Format format, Granularity granularity,
                         size_t group_size = 64, ScaleOptions options = {});

// What quantize() does, into the caller's memory: codes [rows, cols]; per block, in the grid's
// row-major order, scale_inv and amax (max |x| of the block, NaN ignored, inf counted). ops::quantize
// writes tensors with it.
void quantize_blocks(std::span<const float> x, size_t rows, size_t cols, Fp8Format format, BlockShape block,
                     ScaleOptions options, std::span<uint8_t> codes, std::span<float> scale_inv, std::span<float> amax);

// out[r, c] = float(data[r, c]) * scale_inv of its block. out.size() must be rows * cols.
void dequantize(const QuantizedTensor& q, std::span<float> out);
// The same from the caller's memory: codes [rows, cols], scale_inv per block (grid row-major).
void dequantize_blocks(std::span<const uint8_t> codes, size_t rows, size_t cols, Fp8Format format, BlockShape block,
                       std::span<const float> scale_inv, std::span<float> out);

}  // namespace fp8kit
