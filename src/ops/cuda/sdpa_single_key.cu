// SDPA's backward at seq 1, which cuDNN refuses (s_q = s_kv = 1): each query sees one key with
// probability 1, so the scores get no gradient (dq = dk = 0) and dv sums dout over its kv group.
#include "ops/cuda/round.cuh"
#include "ops/cuda/sdpa.h"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {

namespace {

__device__ __forceinline__ float as_float(float x) { return x; }
__device__ __forceinline__ float as_float(uint16_t x) { return bf16_to_float(x); }
__device__ __forceinline__ void store(float x, float* p) { *p = round_bf16(x); }
__device__ __forceinline__ void store(float x, uint16_t* p) { *p = float_to_bf16(x); }

// dv [rows = batch * kv_heads, head_dim]: row r sums dout's rows r * group .. (r + 1) * group - 1.
template <typename T>
__global__ void group_sums_kernel(const T* dout, int64_t rows, int64_t group, int64_t head_dim, T* dv) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= rows * head_dim) return;
  const T* src = dout + (i / head_dim) * group * head_dim + i % head_dim;
  float sum = 0.0f;
  for (int64_t g = 0; g < group; ++g) sum += as_float(src[g * head_dim]);
  store(sum, dv + i);
}

}  // namespace

void sdpa_single_key_backward(const ops::SdpaShape& s, bool bf16, const void* dout, void* dq, void* dk, void* dv,
                              cudaStream_t stream) {
  const size_t element = bf16 ? sizeof(uint16_t) : sizeof(float);
  const int64_t rows = s.batch * s.kv_heads, group = s.heads / s.kv_heads, n = rows * s.head_dim;
  FP8KIT_CUDA_CHECK(cudaMemsetAsync(dq, 0, s.batch * s.heads * s.head_dim * element, stream));
  FP8KIT_CUDA_CHECK(cudaMemsetAsync(dk, 0, n * element, stream));
  constexpr int kThreads = 256;
  if (bf16) {
    group_sums_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
        static_cast<const uint16_t*>(dout), rows, group, s.head_dim, static_cast<uint16_t*>(dv));
  } else {
    group_sums_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(static_cast<const float*>(dout), rows, group,
                                                                        s.head_dim, static_cast<float*>(dv));
  }
  check_launch("sdpa_single_key_backward");
}

}  // namespace fp8kit::cuda
