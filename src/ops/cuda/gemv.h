// Decode-sized GEMMs (a few rows of activations times a weight): y[m, n] = a[m, k] . b[n, k]^T for
// m <= kGemvMaxRows, reading the weight b once at close to HBM bandwidth, where cuBLASLt's tiles
// (64+ rows) read it at a fraction of that. m = 1 on CUDA cores, 2 <= m <= 8 on tensor cores (the m
// rows of a are the MMA's n, so each m costs about what m = 1 does).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/gemm.h"

namespace fp8kit::cuda {

// The largest m gemv runs (an MMA's n).
constexpr int64_t kGemvMaxRows = 8;

// Whether gemv runs these GemmArgs: 1 <= m <= kGemvMaxRows, k a multiple of 16, a and b 16-byte
// aligned; bf16 x bf16 or FP8 x FP8 (not E5M2 x E5M2) into bf16 or f32; scale modes Scalar or
// OuterVec on either operand (per tensor, per row, or per tensor x per row), no GELU, no
// accumulation. Otherwise use GemmContext::gemm.
bool gemv_fits(const GemmArgs& g);

// y = (sa * sb) * dot (+ bias), with sa = a_scale_inv[0] (Scalar) or [i] (OuterVec), sb likewise per
// column j of y (null scale pointers: 1), dot = sum over k of decode(a[i, k]) * decode(b[j, k]): each
// product exact (FP8 codes decoded exactly), summed in float32 (m = 1: 32 lanes in k order, then a
// butterfly; else the tensor cores' float32 accumulation, 8 interleaved slices of k, then the slices
// in order), the scale product and the bias added rounded once each as the CPU's matmul does, then y
// rounded to its dtype. The CPU's results within float32 summation order. One launch on `stream`,
// nothing allocated: capturable. Throws fp8kit::Error unless gemv_fits(g).
void gemv(const GemmArgs& g, cudaStream_t stream = nullptr);

}  // namespace fp8kit::cuda
