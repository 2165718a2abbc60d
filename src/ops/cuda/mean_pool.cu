// Mean pooling kernels: the forward sums each column of a batch element in sequence order, as the CPU
// does, so its float32 result is the same bits; a block (batch element, 32 columns) runs
// ops/cuda/ordered_sum.cuh, whose fetch warps keep the loads in flight while one warp adds (a thread
// per column walking the 200 rows alone waited on memory at every step).
#include "ops/cuda/mean_pool.h"

#include <string>

#include "base/error.h"
#include "ops/cuda/dropout.cuh"
#include "ops/cuda/ordered_sum.cuh"
#include "ops/cuda/round.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kOrderedSumThreads)
    forward_kernel(const float* x, int64_t seq, int64_t dim, bool bf16, DropoutArgs dropout, float* out) {
  const int64_t b = blockIdx.x;
  const int64_t col = static_cast<int64_t>(blockIdx.y) * 32 + threadIdx.x % 32;
  const int64_t column = col < dim ? col : dim - 1;  // for the loads of lanes past the last column
  float sum[1];
  ordered_sum<1>(
      b * seq, (b + 1) * seq, col < dim, [&](int64_t r, float(&v)[1]) { v[0] = x[r * dim + column]; },
      [](float(&acc)[1], const float(&e)[1]) { acc[0] += e[0]; }, sum);
  if (threadIdx.x < 32 && col < dim) {
    const int64_t i = b * dim + col;
    out[i] = dropout.forward(maybe_bf16(sum[0] / static_cast<float>(seq), bf16), static_cast<uint32_t>(i), bf16);
  }
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
  if (batch >= (int64_t{1} << 31) || (dim + 31) / 32 > 65535)
    throw Error("mean_pool_forward: batch " + std::to_string(batch) + " x dim " + std::to_string(dim) +
                " is too large for one launch");
  const dim3 grid(static_cast<unsigned>(batch), blocks_for(dim, 32));
  forward_kernel<<<grid, kOrderedSumThreads, 0, stream>>>(x, seq, dim, bf16,
                                                          dropout_args(dropout, bf16, "mean_pool_forward", batch * dim),
                                                          out);
  check_launch("mean_pool_forward");
}

void mean_pool_backward(const float* dout, const DropoutSite& dropout, bool bf16, int64_t batch, int64_t seq,
                        int64_t dim, float* dx, cudaStream_t stream) {
  const int64_t n = batch * seq * dim;
  if (n == 0) return;
  backward_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
      dout, dropout_args(dropout, bf16, "mean_pool_backward", batch * dim), batch, seq, dim,
      1.0f / static_cast<float>(seq), dx);
  check_launch("mean_pool_backward");
}

}  // namespace fp8kit::cuda
