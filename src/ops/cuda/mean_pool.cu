// Mean pooling kernels: the forward sums one (batch, dim) column per thread in sequence order, as
// the CPU does, so its float32 result is the same bits.
#include "ops/cuda/mean_pool.h"

#include <string>

#include "base/error.h"
#include "ops/cuda/check.h"
#include "ops/cuda/dropout.cuh"
#include "ops/cuda/round.cuh"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void forward_kernel(const float* x, int64_t batch, int64_t seq, int64_t dim, bool bf16, DropoutArgs dropout,
                               float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= batch * dim) return;
  const int64_t b = i / dim, d = i % dim;
  float sum = 0.0f;
#pragma unroll 8
  for (int64_t t = 0; t < seq; ++t) sum += x[(b * seq + t) * dim + d];
  out[i] = dropout.forward(maybe_bf16(sum / static_cast<float>(seq), bf16), static_cast<uint32_t>(i), bf16);
}

__global__ void backward_kernel(const float* dout, DropoutArgs dropout, int64_t batch, int64_t seq, int64_t dim,
                                float inv, float* dx) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= batch * seq * dim) return;
  const int64_t pooled = (i / (seq * dim)) * dim + i % dim;
  dx[i] = dropout.backward(dout[pooled], static_cast<uint32_t>(pooled)) * inv;
}

}  // namespace

void mean_pool_forward(const float* x, int64_t batch, int64_t seq, int64_t dim, bool bf16, const DropoutSite& dropout,
                       float* out, cudaStream_t stream) {
  if (batch * dim == 0) return;
  if (dropout.active && batch * dim > int64_t{UINT32_MAX})
    throw Error("mean_pool_forward: dropout is limited to 2^32 pooled elements, got " + std::to_string(batch * dim));
  forward_kernel<<<blocks_for(batch * dim, kThreads), kThreads, 0, stream>>>(
      x, batch, seq, dim, bf16, dropout_args(dropout, bf16, "mean_pool_forward"), out);
  check_launch("mean_pool_forward");
}

void mean_pool_backward(const float* dout, const DropoutSite& dropout, bool bf16, int64_t batch, int64_t seq,
                        int64_t dim, float* dx, cudaStream_t stream) {
  const int64_t n = batch * seq * dim;
  if (n == 0) return;
  if (dropout.active && batch * dim > int64_t{UINT32_MAX})
    throw Error("mean_pool_backward: dropout is limited to 2^32 pooled elements, got " + std::to_string(batch * dim));
  backward_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
      dout, dropout_args(dropout, bf16, "mean_pool_backward"), batch, seq, dim, 1.0f / static_cast<float>(seq), dx);
  check_launch("mean_pool_backward");
}

}  // namespace fp8kit::cuda
