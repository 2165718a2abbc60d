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

QuantizedTensor quantize(std::span<const float> x, size_t rows, size_t cols, Fp8Format format, Granularity granularity,
                         size_t group_size, ScaleOptions options) {
  FP8KIT_CHECK(x.size() == rows * cols, "quantize: the input has {} elements but the shape [{}, {}] needs {}",
               x.size(), rows, cols, rows * cols);
  QuantizedTensor q;
  q.format = format, q.granularity = granularity, q.rows = rows, q.cols = cols;
  switch (granularity) {
    case Granularity::PerTensor:
      q.block_rows = std::max<size_t>(rows, 1), q.block_cols = std::max<size_t>(cols, 1);
      break;
    case Granularity::PerRow:
      q.block_rows = 1, q.block_cols = std::max<size_t>(cols, 1);
      break;
    case Granularity::PerGroup:
      FP8KIT_CHECK(group_size > 0, "quantize: group size must be > 0");
      q.block_rows = 1, q.block_cols = group_size;
      break;
    case Granularity::Block1x128:
      q.block_rows = 1, q.block_cols = 128;
      break;
    case Granularity::Block128x128:
      q.block_rows = 128, q.block_cols = 128;
      break;
  }
  q.data.resize(x.size());
  q.scale_inv.resize(q.scale_rows() * q.scale_cols());
  if (granularity == Granularity::PerTensor) {  // one block: let convert.h thread the whole array
    const float scale = current_scale(amax(x), format, options);
    quantize_fp8(x, scale, format, q.data);
    if (!q.scale_inv.empty()) q.scale_inv[0] = 1.0f / scale;
    return q;
  }
  const auto blocks = static_cast<int64_t>(q.scale_inv.size());
  const bool parallel = x.size() >= kParallelMinElements;
#pragma omp parallel for schedule(dynamic, 4) if (parallel)
  for (int64_t b = 0; b < blocks; ++b) {
    const size_t r0 = static_cast<size_t>(b) / q.scale_cols() * q.block_rows;
    const size_t c0 = static_cast<size_t>(b) % q.scale_cols() * q.block_cols;
    const size_t r1 = std::min(rows, r0 + q.block_rows), width = std::min(cols, c0 + q.block_cols) - c0;
    float block_amax = 0.0f;
    for (size_t r = r0; r < r1; ++r) block_amax = std::max(block_amax, amax(x.subspan(r * cols + c0, width)));
    const float scale = current_scale(block_amax, format, options);
    for (size_t r = r0; r < r1; ++r) {
      quantize_fp8(x.subspan(r * cols + c0, width), scale, format, std::span(q.data).subspan(r * cols + c0, width));
    }
    q.scale_inv[static_cast<size_t>(b)] = 1.0f / scale;
  }
  return q;
}

void dequantize(const QuantizedTensor& q, std::span<float> out) {
  FP8KIT_CHECK(out.size() == q.rows * q.cols && q.data.size() == out.size(),
               "dequantize: output has {} elements but the tensor is [{}, {}]", out.size(), q.rows, q.cols);
  FP8KIT_CHECK(q.scale_inv.size() == q.scale_rows() * q.scale_cols(),
               "dequantize: {} scales for a [{}, {}] grid of blocks", q.scale_inv.size(), q.scale_rows(), q.scale_cols());
  const std::span<const uint8_t> data(q.data);
  if (q.granularity == Granularity::PerTensor) {
    if (!out.empty()) dequantize_fp8(data, q.format, q.scale_inv[0], out);
    return;
  }
  float values[256];  // decoded codes; times each block's scale_inv below (one rounding, as dequantize_fp8)
  for (int c = 0; c < 256; ++c) values[c] = decode_fp8(static_cast<uint8_t>(c), q.format);
  const auto rows = static_cast<int64_t>(q.rows);
  const bool parallel = out.size() >= kParallelMinElements;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t r = 0; r < rows; ++r) {
    for (size_t c0 = 0; c0 < q.cols; c0 += q.block_cols) {
      const float scale_inv = q.scale_inv_at(static_cast<size_t>(r), c0);
      const size_t begin = static_cast<size_t>(r) * q.cols + c0, end = begin + std::min(q.block_cols, q.cols - c0);
      for (size_t i = begin; i < end; ++i) out[i] = values[data[i]] * scale_inv;
    }
  }
}

}  // namespace fp8kit
