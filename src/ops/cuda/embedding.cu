// Embedding kernels: one thread per output element; the backward adds with atomics.
#include "ops/cuda/embedding.h"

#include "ops/cuda/check.h"
#include "ops/cuda/round.cuh"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void forward_kernel(EmbeddingShape s, const int32_t* tokens, const float* token, const float* position,
                               bool bf16, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= s.batch * s.seq * s.dim) return;
  const int64_t bt = i / s.dim, d = i % s.dim;
  const float t = token[static_cast<int64_t>(tokens[bt]) * s.dim + d], p = position[(bt % s.seq) * s.dim + d];
  out[i] = bf16 ? round_bf16(round_bf16(t) + round_bf16(p)) : t + p;
}

__global__ void backward_kernel(EmbeddingShape s, const int32_t* tokens, const float* dout, float* token_grad,
                                float* position_grad) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= s.batch * s.seq * s.dim) return;
  const int64_t bt = i / s.dim, d = i % s.dim;
  const float g = dout[i];
  atomicAdd(token_grad + static_cast<int64_t>(tokens[bt]) * s.dim + d, g);
  atomicAdd(position_grad + (bt % s.seq) * s.dim + d, g);
}

}  // namespace

void embedding_forward(const EmbeddingShape& shape, const int32_t* tokens, const float* token, const float* position,
                       bool bf16, float* out, cudaStream_t stream) {
  const int64_t n = shape.batch * shape.seq * shape.dim;
  if (n == 0) return;
  forward_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(shape, tokens, token, position, bf16, out);
  check_launch("embedding_forward");
}

void embedding_backward(const EmbeddingShape& shape, const int32_t* tokens, const float* dout, float* token_grad,
                        float* position_grad, cudaStream_t stream) {
  FP8KIT_CUDA_CHECK(cudaMemsetAsync(token_grad, 0, shape.vocabulary * shape.dim * sizeof(float), stream));
  FP8KIT_CUDA_CHECK(cudaMemsetAsync(position_grad, 0, shape.seq * shape.dim * sizeof(float), stream));
  const int64_t n = shape.batch * shape.seq * shape.dim;
  if (n == 0) return;
  backward_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(shape, tokens, dout, token_grad, position_grad);
  check_launch("embedding_backward");
}

}  // namespace fp8kit::cuda
