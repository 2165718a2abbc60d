// fp8kit's own block-scaled FP8 GEMM for Hopper (sm_90a): y = a . b^T with a's scales per 1 x 128
// group along k (ScaleMode::Vec128) and b's per 128 x 128 block (ScaleMode::Block128), DeepSeek-V3's
// recipe. cuBLASLt runs these scale modes with its split accumulator only; this kernel promotes each
// 128-wide slice of k from the tensor cores' accumulator into fp32 registers times its two scales, as
// DeepGEMM does (TMA loads, a warp-specialised pipeline, wgmma, a persistent grid).
#pragma once

#include <cuda_runtime.h>

#include "ops/cuda/gemm.h"

namespace fp8kit::cuda {

// Whether block_gemm runs `g` on this device: an sm_90 GPU; Vec128 x Block128 scales; E4M3 or E5M2
// operands (not both E5M2); y f32 or bf16, with or without accumulation and a bf16 bias (8-byte
// aligned); k and n multiples of 16, m of 4 (TMA's 16-byte strides); a, b, a's scales and y 16-byte
// aligned. Any m, n and k beyond that: partial tiles and 128-blocks are zero-filled by TMA.
bool block_gemm_runs(const GemmArgs& g);

// Queues the GEMM on `stream` (block_gemm_runs(g) must hold).
void block_gemm(const GemmArgs& g, cudaStream_t stream);

}  // namespace fp8kit::cuda
