// FP8 quantization of tensors on any device: the same call on the CPU and on a CUDA GPU gives the
// same bytes (codes, transposed codes, amax and scale_inv), so either device can produce the FP8
// operands that matmul() reads.
#pragma once

#include "numerics/format.h"
#include "numerics/scale.h"
#include "tensor/tensor.h"

namespace fp8kit::ops {

// A quantized [rows, cols] matrix and what dequantizes it, all on the input's device.
struct Fp8Tensor {
  Tensor data;       // [rows, cols] FP8 codes (E4M3 or E5M2): code = fp8(x * scale), saturating
  Tensor data_t;     // [cols, rows] the same codes transposed (Hopper's dgrad/wgrad operand), or empty
  Tensor scale_inv;  // [1] f32: x ~= float(code) * scale_inv
  Tensor amax;       // [1] f32: max |x| of the input (NaN ignored, inf counted)
};

// Quantizes x ([rows, cols], or [n] as one row; f32 or bf16) with scale ([1] f32, finite and > 0, on
// x's device; checked on the host, which costs the GPU one 4-byte read). `transpose` also writes data_t.
Fp8Tensor quantize_fp8(const Tensor& x, Fp8Format format, const Tensor& scale, bool transpose = false);

// Current scaling: the scale comes from x's own amax (numerics' current_scale with `options`), then
// as above. On the GPU the amax makes one round trip to the host.
Fp8Tensor quantize_fp8_current(const Tensor& x, Fp8Format format, ScaleOptions options = {}, bool transpose = false);

// float(code) * scale_inv as f32, on q's device.
Tensor dequantize(const Fp8Tensor& q);

}  // namespace fp8kit::ops
