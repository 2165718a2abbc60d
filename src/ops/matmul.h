// Matrix products of tensors on any device, the same call on the CPU and on a CUDA GPU:
// y = a . b^T, both operands K-major as a Linear's x [M, K] and W [N, K] (Hopper's FP8 "TN" layout).
// The CPU computes exactly what an fp32-accumulating tensor core would (ops/gemm.h); the GPU runs
// cuBLASLt (ops/cuda/gemm.h) on the legacy default stream, so results agree within fp32 summation
// order (and, for FP8 with fast accumulation, Hopper's reduced-precision accumulator).
#pragma once

#include "ops/quantize.h"
#include "tensor/tensor.h"

namespace fp8kit::ops {

struct MatmulOptions {
  // [n], added to every row before y is rounded to its dtype: y's dtype for f32/bf16 products, bf16
  // for FP8 products (cuBLASLt's rule), on the operands' device. Null: no bias.
  const Tensor* bias = nullptr;
  // FP8 on the GPU: Hopper's fast accumulation (forward GEMMs) instead of the split accumulator.
  bool fast_accumulation = false;
};

// y [m, n] = a [m, k] . b [n, k]^T (+ bias): f32 x f32 -> f32, bf16 x bf16 -> bf16 or f32.
// y must be allocated with its shape and dtype on the operands' device.
void matmul(const Tensor& a, const Tensor& b, Tensor& y, const MatmulOptions& options = {});

// The same from FP8 operands: y = (a.scale_inv * b.scale_inv) * decode(a.data) . decode(b.data)^T,
// into bf16 or f32. E4M3 x E4M3, E4M3 x E5M2 and E5M2 x E4M3 (Hopper has no E5M2 x E5M2).
void matmul(const Fp8Tensor& a, const Fp8Tensor& b, Tensor& y, const MatmulOptions& options = {});

}  // namespace fp8kit::ops
