// fp8kit's own FP8 GEMM for short contractions (k up to about 1,400: GPT-2-sized models' and the lab
// MLP's first Linear, k = 768), Hopper (sm_90a): y = epilogue((sa * sb) * a . b^T) with per-tensor or
// per-row x per-row scales and Hopper's fast accumulation (forward GEMMs), bias and GELU in the
// epilogue, y as E4M3 codes (times y_scale), bf16 or f32. A block keeps its 128 rows of a in shared
// memory for every column tile it computes; two math warpgroups take the tiles in turns, so that one's
// epilogue (scales, bias, GELU, conversion, stores) runs while the other's wgmmas keep the tensor cores
// busy (CUTLASS's "ping-pong" schedule). cuBLASLt runs the epilogue after its main loop, which costs a
// short-k GEMM with GELU about half again its time.
#pragma once

#include <cuda_runtime.h>

#include "ops/cuda/gemm.h"

namespace fp8kit::cuda {

// Whether resident_gemm runs `g` on this device: an sm_90 GPU; E4M3 x E4M3, or a bf16 a quantized at
// GemmArgs::a_scale inside the kernel (per-tensor scales); fast accumulation and no accumulation into
// y; Scalar x Scalar (null pointers: 1) or OuterVec x OuterVec scales (both given); y E4M3 (with
// y_scale), bf16 or f32; any epilogue (the bias bf16, 4-byte aligned); k a multiple of 16 whose rows
// of a fit in shared memory beside three stages of b; n a multiple of 8; a, b and y 16-byte aligned.
bool resident_gemm_runs(const GemmArgs& g);

// GemmContext's choice: products of fewer rows run on cuBLASLt. Below 256 rows each cluster gets one
// column tile whose loads and epilogue nothing overlaps (the lab MLP's 32-row inference took twice
// cuBLASLt's time); at 256 rows the two ran level.
inline constexpr int64_t kResidentGemmMinRows = 256;

// Queues the GEMM on `stream` (resident_gemm_runs(g) must hold).
void resident_gemm(const GemmArgs& g, cudaStream_t stream);

}  // namespace fp8kit::cuda
