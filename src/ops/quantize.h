// FP8 quantization of tensors on any device, at every granularity of QuantSpec: the same call on the
// CPU and on a CUDA GPU gives the same bytes (codes, transposed codes, scale_inv and amax), so either
// device can produce the operands that matmul() reads.
#pragma once

#include "ops/context.h"
#include "tensor/qtensor.h"
#include "tensor/tensor.h"

namespace fp8kit::ops {

// Quantizes x ([rows, cols], or [n] as one row; f32 or bf16) as `spec` says, on x's device.
// scale: per tensor only, a delayed scale ([1] f32 on x's device, finite and > 0; checked on the host,
// which costs the GPU one 4-byte read): q = fp8(x * scale). Null: current scaling, each block's scale
// from its own amax (numerics' current_scale with spec.options; per tensor on the GPU the amax makes
// one round trip to the host). `transpose` also writes codes_t: per tensor and 128x128 blocks only
// (whose scales, transposed, are codes_t's); a row's or a group's scales do not carry over to the
// transpose, so quantize x^T for those. PerGroup takes group 32, 64 or 128. On the GPU: on the default
// stream, done on return (a context's queued ops are not waited for: quantize their outputs on it, below).
QTensor quantize(const Tensor& x, const QuantSpec& spec, const Tensor* scale = nullptr, bool transpose = false);

// The same on c's device, queued on c's current lane (the GPU: stream(c)), into q: its tensors are
// sized as spec says, reusing their storage (the same shapes allocate nothing, so a captured CUDA graph
// can run it). A per-tensor `scale` is not read on the GPU (that would wait for the stream), and
// current per-tensor scaling, whose scale the GPU computes on the host, is refused there: pass a
// scale, or quantize per row, group or block. The CPU's bytes are those of quantize() above.
void quantize(Context& c, const Tensor& x, const QuantSpec& spec, QTensor& q, const Tensor* scale = nullptr,
              bool transpose = false);

// q's transpose as a GEMM operand, into t, on c's current lane: codes q.codes_t (t.codes is a view of
// them, valid while q's are), scale_inv and amax the grid of q's 128x128 blocks transposed (or its one
// per-tensor scale): the bytes quantize(x^T) gives, as a 128 x 128 block holds the same values
// transposed. q must have transposed codes (quantize with transpose).
void transpose(Context& c, const QTensor& q, QTensor& t);

// float(code) * scale_inv of its block, as f32 of q.codes' shape, on q's device. On the GPU this one and
// quantize() above run on the default stream and are done on return, but do not wait for a context's
// streams: q written by an op of a context is dequantized on it (below).
Tensor dequantize(const QTensor& q);
// The same on c's device, queued on c's current lane (after the ops that wrote q there).
Tensor dequantize(Context& c, const QTensor& q);

}  // namespace fp8kit::ops
