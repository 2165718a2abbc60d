// Matrix products of tensors on any device, the same call on the CPU and on a CUDA GPU:
// y = a . b^T, both operands K-major as a Linear's x [M, K] and W [N, K] (Hopper's FP8 "TN" layout).
// The CPU computes exactly what an fp32-accumulating tensor core would (ops/gemm.h); the GPU runs
// cuBLASLt (ops/cuda/gemm.h) on the legacy default stream, or for decode-sized products (m <= 8,
// k a multiple of 16: ops/cuda/gemv.h) its own kernel, exact products summed in fp32, which reads
// the weight b once at memory speed; so results agree within fp32 summation order (and, for FP8 with
// fast accumulation on cuBLASLt, Hopper's reduced-precision accumulator).
#pragma once

#include "ops/activation.h"
#include "ops/context.h"
#include "tensor/qtensor.h"
#include "tensor/tensor.h"

namespace fp8kit::ops {

struct MatmulOptions {
  // [n], added to every row before y is rounded to its dtype: y's dtype for f32/bf16 products, bf16
  // for FP8 products (cuBLASLt's rule), on the operands' device. Null: no bias.
  const Tensor* bias = nullptr;
  // After the bias, before y's rounding: None, or Gelu (the tanh form of ops/activation.h; the GPU's
  // epilogues compute the same function with their own tanh: cuBLASLt's, and for short k
  // ops/cuda/resident_gemm.h's, accurate to float32 ulps into bf16 or f32 and to 2^-11 into E4M3,
  // below E4M3's rounding). Not with per-row or block scales.
  Activation activation = Activation::None;
  // FP8 products into an e4m3 or e5m2 y: [1] f32 on the operands' device; y = fp8(scale * result)
  // (saturating), ops::quantize's codes of the result at that static scale, written by the GEMM's
  // epilogue on the GPU (no bf16 y and quantization pass). Per-tensor operand scales only.
  const Tensor* y_scale = nullptr;
  // FP8 on the GPU: Hopper's fast accumulation (forward GEMMs) instead of the split accumulator.
  bool fast_accumulation = false;
  // b is not written by the op queued just before this one (model weights): on the GPU a decode GEMM
  // may start reading it before that op has finished.
  bool constant_b = false;
};

// y [m, n] = a [m, k] . b [n, k]^T (+ bias): f32 x f32 -> f32, bf16 x bf16 -> bf16 or f32.
// y must be allocated with its shape and dtype on the operands' device.
void matmul(const Tensor& a, const Tensor& b, Tensor& y, const MatmulOptions& options = {});

// The same from quantized operands (ops::quantize of x [m, k] and w [n, k], codes K-major), into bf16,
// f32 or (options.y_scale) FP8 codes. E4M3 x E4M3, E4M3 x E5M2 and E5M2 x E4M3 (Hopper has no E5M2 x E5M2). The granularity pairs:
//   per tensor x per tensor: y = (sa * sb) * (A . B^T)
//   per row x per row:       y[i, j] = (sa[i] * sb[j]) * (A . B^T)[i, j]   (per token x per channel)
//   per tensor x per row:    y[i, j] = (sa * sb[j]) * (A . B^T)[i, j]      (static activation scale x
//                                                                           per-channel weights)
//   1x128 x 128x128, 1x128 x 1x128 (DeepSeek-V3 / Transformer Engine's Float8BlockScaling; 1x128 is
//   PerGroup with group 128 or Block1x128): over the 128-wide slices s of k,
//                            y[i, j] = sum_s (A_s . B_s^T)[i, j] * (sa[i, s] * sb[block of j, s])
// where A, B are the decoded codes. The CPU computes exactly that in fp32: each slice's products
// summed by OpenBLAS's sgemm, the partial times the product of the two scales (one rounding each), added
// to y's fp32 accumulator slice by slice in k order; per tensor and per row, one slice. The GPU runs
// gemv for m <= 8 (per tensor and per row pairs) and otherwise cuBLASLt (scale modes; per tensor x per
// row as row x row with a's scale repeated m times; per row falls back to an unscaled GEMM and a
// scaling pass where cuBLASLt has no algorithm): the same formula, its own summation order within a slice. Block-scaled GEMMs take no
// fast accumulation (Hopper's cuBLASLt runs them with the split accumulator).
void matmul(const QTensor& a, const QTensor& b, Tensor& y, const MatmulOptions& options = {});

// The same two on c's device, queued on c's current lane with its cuBLASLt context (the GPU: stream(c),
// gemm(c)); the 1x128 scales (and per tensor x per row's repeated scale) that the GPU lays out for
// cuBLASLt go to c.scratch, so the same shapes allocate nothing and a captured CUDA graph can run
// them. The CPU's results are the ones above.
void matmul(Context& c, const Tensor& a, const Tensor& b, Tensor& y, const MatmulOptions& options = {});
void matmul(Context& c, const QTensor& a, const QTensor& b, Tensor& y, const MatmulOptions& options = {});

// Static activation scales (inference): y = a . b^T with a bf16 a quantized per tensor to E4M3 at the
// scale a_scale ([1] f32 on a's device), b E4M3 per tensor: the codes of quantize(a, {.format = E4M3},
// &a_scale) times b, which is exactly what the CPU runs. On the GPU the short-k kernel
// (ops/cuda/resident_gemm.h, from 256 rows) quantizes a's rows as it loads them, so neither a
// quantization pass nor a's codes cost a trip through memory; elsewhere a is quantized into a temporary
// first and cuBLASLt multiplies (no gemv for m <= 8). The GPU's product may then differ from
// matmul(c, quantize(...), b, ...)'s in the last bits where the two run different GEMMs (fast
// accumulation's order). a's amax is not recorded.
void matmul(Context& c, const Tensor& a, const Tensor& a_scale, const QTensor& b, Tensor& y,
            const MatmulOptions& options = {});

}  // namespace fp8kit::ops
