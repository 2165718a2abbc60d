// Block-scaled quantization: per block, amax -> current scale -> saturating FP8 cast (convert.h).
#include "numerics/quantized_tensor.h"

#include "base/error.h"
#include "numerics/cast.h"
#include "numerics/convert.h"

#include <omp.h>

#include <algorithm>
#include <string>

namespace fp8kit {

Granularity parse_granularity(std::string_view text) {
  if (text == "tensor") return Granularity::PerTensor;
  if (text == "row") return Granularity::PerRow;
  if (text == "group") return Granularity::PerGroup;
  if (text == "1x128") return Granularity::Block1x128;
  if (text == "128x128") return Granularity::Block128x128;
  fail("unknown scale granularity '{}': use tensor, row, group, 1x128 or 128x128", text);
}

std::string_view name(Granularity granularity) {
  switch (granularity) {
    case Granularity::PerTensor:
      return "tensor";
    case Granularity::PerRow:
      return "row";
    case Granularity::PerGroup:
      return "group";
    case Granularity::Block1x128:
      return "1x128";
    case Granularity::Block128x128:
      return "128x128";
  }
  return "?";
}

BlockShape block_shape(Granularity granularity, size_t rows, size_t cols, size_t group_size) {
  switch (granularity) {
    case Granularity::PerTensor:
      return {std::max<size_t>(rows, 1), std::max<size_t>(cols, 1)};
    case Granularity::PerRow:
      return {1, std::max<size_t>(cols, 1)};
    case Granularity::PerGroup:
      FP8KIT_CHECK(group_size > 0, "quantize: group size must be > 0");
      return {1, group_size};
    case Granularity::Block1x128:
      return {1, 128};
    case Granularity::Block128x128:
      return {128, 128};
  }
  fail("quantize: unknown granularity {}", static_cast<int>(granularity));
}

void quantize_blocks(std::span<const float> x, size_t rows, size_t cols, Fp8Format format, BlockShape block,
                     ScaleOptions options, std::span<uint8_t> codes, std::span<float> scale_inv, std::span<float> amax) {
  const size_t grid_rows = (rows + block.rows - 1) / block.rows, grid_cols = (cols + block.cols - 1) / block.cols;
  FP8KIT_CHECK(x.size() == rows * cols && codes.size() == x.size(),
               "quantize: the input has {} elements and the codes {} but the shape [{}, {}] needs {}", x.size(),
               codes.size(), rows, cols, rows * cols);
  FP8KIT_CHECK(scale_inv.size() == grid_rows * grid_cols && amax.size() == scale_inv.size(),
               "quantize: {} scale_inv and {} amax slots for a grid of {} x {} blocks", scale_inv.size(), amax.size(),
               grid_rows, grid_cols);
  if (block.rows >= rows && block.cols >= cols) {  // one block: let convert.h thread the whole array
    if (scale_inv.empty()) return;
    amax[0] = fp8kit::amax(x);
    const float scale = current_scale(amax[0], format, options);
    quantize_fp8(x, scale, format, codes);
    scale_inv[0] = 1.0f / scale;
    return;
  }
  const auto blocks = static_cast<int64_t>(scale_inv.size());
  const bool parallel = x.size() >= kParallelMinElements;
#pragma omp parallel for schedule(dynamic, 4) if (parallel)
  for (int64_t b = 0; b < blocks; ++b) {
    const size_t r0 = static_cast<size_t>(b) / grid_cols * block.rows;
    const size_t c0 = static_cast<size_t>(b) % grid_cols * block.cols;
    const size_t r1 = std::min(rows, r0 + block.rows), width = std::min(cols, c0 + block.cols) - c0;
    float block_amax = 0.0f;
    for (size_t r = r0; r < r1; ++r) block_amax = std::max(block_amax, fp8kit::amax(x.subspan(r * cols + c0, width)));
    const float scale = current_scale(block_amax, format, options);
    for (size_t r = r0; r < r1; ++r) quantize_fp8(x.subspan(r * cols + c0, width), scale, format, codes.subspan(r * cols + c0, width));
    scale_inv[static_cast<size_t>(b)] = 1.0f / scale;
    amax[static_cast<size_t>(b)] = block_amax;
  }
}

QuantizedTensor quantize(std::span<const float> x, size_t rows, size_t cols, Fp8Format format, Granularity granularity,
                         size_t group_size, ScaleOptions options) {
  FP8KIT_CHECK(x.size() == rows * cols, "quantize: the input has {} elements but the shape [{}, {}] needs {}",
               x.size(), rows, cols, rows * cols);
  QuantizedTensor q;
  q.format = format, q.granularity = granularity, q.rows = rows, q.cols = cols;
  const BlockShape block = block_shape(granularity, rows, cols, group_size);
  q.block_rows = block.rows, q.block_cols = block.cols;
  q.data.resize(x.size());
  q.scale_inv.resize(q.scale_rows() * q.scale_cols());
  std::vector<float> amax(q.scale_inv.size());
  quantize_blocks(x, rows, cols, format, block, options, q.data, q.scale_inv, amax);
  return q;
}

void dequantize_blocks(std::span<const uint8_t> codes, size_t rows, size_t cols, Fp8Format format, BlockShape block,
                       std::span<const float> scale_inv, std::span<float> out) {
  FP8KIT_CHECK(out.size() == rows * cols && codes.size() == out.size(),
               "dequantize: output has {} elements and the codes {} but the tensor is [{}, {}]", out.size(),
               codes.size(), rows, cols);
  const size_t grid_rows = (rows + block.rows - 1) / block.rows, grid_cols = (cols + block.cols - 1) / block.cols;
  FP8KIT_CHECK(scale_inv.size() == grid_rows * grid_cols, "dequantize: {} scales for a [{}, {}] grid of blocks",
               scale_inv.size(), grid_rows, grid_cols);
  if (block.rows >= rows && block.cols >= cols) {
    if (!out.empty()) dequantize_fp8(codes, format, scale_inv[0], out);
    return;
  }
  float values[256];  // decoded codes; times each block's scale_inv below (one rounding, as dequantize_fp8)
  for (int c = 0; c < 256; ++c) values[c] = decode_fp8(static_cast<uint8_t>(c), format);
  const auto n = static_cast<int64_t>(rows);
  const bool parallel = out.size() >= kParallelMinElements;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t r = 0; r < n; ++r) {
    for (size_t c0 = 0; c0 < cols; c0 += block.cols) {
      const float s = scale_inv[static_cast<size_t>(r) / block.rows * grid_cols + c0 / block.cols];
      const size_t begin = static_cast<size_t>(r) * cols + c0, end = begin + std::min(block.cols, cols - c0);
      for (size_t i = begin; i < end; ++i) out[i] = values[codes[i]] * s;
    }
  }
}

void dequantize(const QuantizedTensor& q, std::span<float> out) {
  dequantize_blocks(q.data, q.rows, q.cols, q.format, {q.block_rows, q.block_cols}, q.scale_inv, out);
}

}  // namespace fp8kit
