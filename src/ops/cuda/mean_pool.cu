// Mean pooling kernels: the forward sums one (batch, dim) column per thread in sequence order, as
// the CPU does, so its float32 result is the same bits.
#include "ops/cuda/mean_pool.h"

#include "ops/cuda/check.h"
#include "ops/cuda/round.cuh"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void forward_kernel(const float* x, int64_t batch, int64_t seq, int64_t dim, bool bf16, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= batch * dim) return;
  const int64_t b = i / dim, d = i % dim;
  float sum = 0.0f;
#pragma unroll 8
  for (int64_t t = 0; t < seq; ++t) sum += x[(b * seq + t) * dim + d];
  out[i] = maybe_bf16(sum / static_cast<float>(seq), bf16);
}

__global__ void backward_kernel(const float* dout, int64_t batch, int64_t seq, int64_t dim, float inv, float* dx) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= batch * seq * dim) return;
  dx[i] = dout[(i / (seq * dim)) * dim + i % dim] * inv;
}

}  // namespace

void mean_pool_forward(const float* x, int64_t batch, int64_t seq, int64_t dim, bool bf16, float* out,
                       cudaStream_t stream) {
  if (batch * dim == 0) return;
  forward_kernel<<<blocks_for(batch * dim, kThreads), kThreads, 0, stream>>>(x, batch, seq, dim, bf16, out);
  check_launch("mean_pool_forward");
}

void mean_pool_backward(const float* dout, int64_t batch, int64_t seq, int64_t dim, float* dx, cudaStream_t stream) {
  const int64_t n = batch * seq * dim;
  if (n == 0) return;
  backward_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(dout, batch, seq, dim,
                                                                    1.0f / static_cast<float>(seq), dx);
  check_launch("mean_pool_backward");
}

}  // namespace fp8kit::cuda
