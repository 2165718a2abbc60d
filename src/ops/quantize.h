// FP8 quantization of tensors on any device, at every granularity of QuantSpec: the same call on the
// CPU and on a CUDA GPU gives the same bytes (codes, transposed codes, scale_inv and amax), so either
// device can produce the operands that matmul() reads.
#pragma once

#include "tensor/qtensor.h"
#include "tensor/tensor.h"

namespace fp8kit::ops {

// Quantizes x ([rows, cols], or [n] as one row; f32 or bf16) as `spec` says, on x's device.
// scale: per tensor only, a delayed scale ([1] f32 on x's device, finite and > 0; checked on the host,
// which costs the GPU one 4-byte read): q = fp8(x * scale). Null: current scaling, each block's scale
// from its own amax (numerics' current_scale with spec.options; per tensor on the GPU the amax makes
// one round trip to the host). `transpose` also writes codes_t: per tensor and 128x128 blocks only
// (whose scales, transposed, are codes_t's); a row's or a group's scales do not carry over to the
// transpose, so quantize x^T for those. PerGroup takes group 32, 64 or 128.
QTensor quantize(const Tensor& x, const QuantSpec& spec, const Tensor* scale = nullptr, bool transpose = false);

// float(code) * scale_inv of its block, as f32 of q.codes' shape, on q's device.
Tensor dequantize(const QTensor& q);

}  // namespace fp8kit::ops
