// A quantized tensor that carries its own scaling: FP8 codes, optionally their transpose, and one
// scale_inv and amax per block of the granularity its QuantSpec names, all on one device.
// ops::quantize makes them (ops/quantize.h) and ops::matmul multiplies them (ops/matmul.h).
#pragma once

#include "numerics/format.h"
#include "numerics/quantized_tensor.h"
#include "numerics/scale.h"
#include "tensor/tensor.h"

#include <cstdint>

namespace fp8kit {

// How a [rows, cols] matrix (cols = the GEMM's contraction dimension K) is quantized.
struct QuantSpec {
  Fp8Format format = Fp8Format::E4M3;
  // PerTensor; PerRow (a weight's output channel, an activation's token); PerGroup: 1 x group along K
  // (group 32, 64 or 128; Block1x128 is PerGroup with group 128); Block128x128.
  Granularity granularity = Granularity::PerTensor;
  int group = 128;
  ScaleOptions options{};  // margin and power-of-two rounding of current scales

  // The tile one scale covers in a [rows, cols] matrix (numerics' block_shape).
  BlockShape block(int64_t rows, int64_t cols) const {
    return block_shape(granularity, static_cast<size_t>(rows), static_cast<size_t>(cols), static_cast<size_t>(group));
  }
};

// x ~= float(codes[r, c]) * scale_inv[r / block.rows, c / block.cols]; q = fp8(x * scale),
// scale_inv = 1 / scale (saturating). Blocks at the bottom and right edges may be partial.
struct QTensor {
  Tensor codes;      // [rows, cols] E4M3 / E5M2 codes ([n] for a 1-D input: one row)
  Tensor codes_t;    // [cols, rows] the same codes transposed (Hopper's dgrad/wgrad operand), or empty
  Tensor scale_inv;  // f32 [ceil(rows / block.rows), ceil(cols / block.cols)], row-major ([1] per tensor)
  Tensor amax;       // f32, scale_inv's shape: each block's max |x| (NaN ignored, inf counted)
  QuantSpec spec;

  int64_t rows() const { return codes.rank() == 1 ? 1 : codes.dim(0); }
  int64_t cols() const { return codes.rank() == 1 ? codes.dim(0) : codes.dim(1); }
  BlockShape block() const { return spec.block(rows(), cols()); }
};

}  // namespace fp8kit
