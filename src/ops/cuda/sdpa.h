// The CUDA implementation of ops/sdpa.h (called by its dispatch after the argument checks, with the
// scale resolved): cuDNN's fused flash attention, through cudnn-frontend graphs in the BSHD layout.
// Each (lane, shape) gets its graph built and planned at its first call, which must be eager (not
// inside a CUDA graph capture); later calls only execute it. cuDNN's headers stay in sdpa.cpp.
#pragma once

#include "ops/sdpa.h"

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

namespace fp8kit::cuda {

// A context's cuDNN handles (one per lane, on the lane's stream) and its built SDPA graphs; made at
// its first SDPA call (Context::Cuda::sdpa).
struct SdpaGraphs;
struct SdpaGraphsDeleter {
  void operator()(SdpaGraphs* graphs) const;
};
using SdpaGraphsPtr = std::unique_ptr<SdpaGraphs, SdpaGraphsDeleter>;

// The backward at seq 1, which cuDNN refuses: one key per query, with probability 1, so dq = dk = 0
// and dv sums dout over the query heads of its kv group. Elements bf16 (bits) or float (dv then
// rounded to bf16 values, as the GPU's other f32 results).
void sdpa_single_key_backward(const ops::SdpaShape& s, bool bf16, const void* dout, void* dq, void* dk, void* dv,
                              cudaStream_t stream);

// The FP8 forward's scalars, one float array on the device: q's, k's and v's amaxes (filled by the
// amax pass), then scales and their inverses for q, k, v, out (v's x kSdpaFp8OutScale) and the
// probabilities (kSdpaFp8ProbabilityScale), then cuDNN's amaxes of the probabilities and out.
inline constexpr int kSdpaFp8Amax = 0, kSdpaFp8Scale = 3, kSdpaFp8ScaleInv = 8, kSdpaFp8CudnnAmax = 13,
                     kSdpaFp8Floats = 15;
// scales' kSdpaFp8Scale and kSdpaFp8ScaleInv entries from the amaxes (numerics' current_scale).
void sdpa_fp8_scales(float* scales, cudaStream_t stream);
// out[i] = bf16(E4M3 codes[i] * *scale_inv): bf16 bits, or (bf16 false) floats of bf16 values; n a
// multiple of 8, codes 8-byte and out 16-byte aligned (checked).
void sdpa_fp8_dequantize(const uint8_t* codes, const float* scale_inv, int64_t n, bool bf16, void* out,
                         cudaStream_t stream);

}  // namespace fp8kit::cuda

namespace fp8kit::ops {

// bf16 tensors go to cuDNN as they are; f32 ones are cast to bf16 copies in the lane's scratch (and
// the results cast back), so f32 outputs hold bf16 values. The workspace is the lane's scratch too.
// lengths (or null): the graph with cuDNN's padding mask, the lengths its seq_len_q and seq_len_kv.
void cuda_sdpa_forward(Context& c, const SdpaShape& s, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                       Tensor& lse, const Tensor* lengths);
void cuda_sdpa_backward(Context& c, const SdpaShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& out, const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv);

}  // namespace fp8kit::ops
