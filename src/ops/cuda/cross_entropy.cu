// Cross-entropy kernel: a block per row, 4 logits at a time where the row is 16-byte aligned. Each
// thread keeps a running (max, sum of exp(logit - max)) over its share of the row (one exponential per
// logit); the block combines the pairs in a fixed order, then each thread writes its gradients.
#include "ops/cuda/cross_entropy.h"

#include <cfloat>
#include <string>

#include "base/error.h"
#include "ops/cuda/aligned.h"
#include "ops/cuda/rows.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kMaxThreads = 512;

// A running softmax denominator: sum = sum of exp(v - max) over the values seen. max starts at
// -FLT_MAX rather than -inf, so that -inf logits add exp(-inf) = 0 instead of exp(NaN).
struct MaxSum {
  float max, sum;
};

__device__ __forceinline__ void add_value(MaxSum& a, float v) {
  if (v > a.max) {
    a.sum = __fadd_rn(__fmul_rn(a.sum, expf(__fsub_rn(a.max, v))), 1.0f);
    a.max = v;
  } else {
    a.sum = __fadd_rn(a.sum, expf(__fsub_rn(v, a.max)));
  }
}

__device__ __forceinline__ MaxSum combine(MaxSum a, MaxSum b) {
  const float m = fmaxf(a.max, b.max);
  return {m, __fadd_rn(__fmul_rn(a.sum, expf(__fsub_rn(a.max, m))), __fmul_rn(b.sum, expf(__fsub_rn(b.max, m))))};
}

// The block's pair, in every thread: a warp butterfly, then lane 0's pairs combined in warp order.
__device__ MaxSum block_max_sum(MaxSum a) {
  __shared__ MaxSum partial[32];
  for (int o = 16; o > 0; o >>= 1)
    a = combine(a, {__shfl_xor_sync(0xFFFFFFFFu, a.max, o), __shfl_xor_sync(0xFFFFFFFFu, a.sum, o)});
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = a;
  __syncthreads();
  MaxSum total = partial[0];
  for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) total = combine(total, partial[w]);
  return total;
}

template <int V>
__global__ void cross_entropy_kernel(int64_t vocab, const float* logits, const int32_t* targets, float grad_scale,
                                     float* losses, float* dlogits) {
  const int64_t r = blockIdx.x, n = vocab / V;
  const int32_t target = targets[r];
  const bool counted = target >= 0 && target < vocab;
  auto* d = dlogits != nullptr ? reinterpret_cast<Floats<V>*>(dlogits + r * vocab) : nullptr;
  if (!counted) {
    if (threadIdx.x == 0) losses[r] = 0.0f;
    if (d != nullptr)
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x) d[j] = Floats<V>{};
    return;
  }
  const float* row = logits + r * vocab;
  // Read before the block's sync: the gradient pass may overwrite the logits.
  const float target_logit = threadIdx.x == 0 ? row[target] : 0.0f;
  const auto* l = reinterpret_cast<const Floats<V>*>(row);
  MaxSum mine{-FLT_MAX, 0.0f};
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const Floats<V> a = l[j];
#pragma unroll
    for (int k = 0; k < V; ++k) add_value(mine, a.v[k]);
  }
  const MaxSum total = block_max_sum(mine);
  if (threadIdx.x == 0) losses[r] = __fsub_rn(logf(total.sum), __fsub_rn(target_logit, total.max));
  if (d == nullptr) return;
  const float inv = __fdiv_rn(1.0f, total.sum);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const Floats<V> a = l[j];
    Floats<V> g;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float p = __fmul_rn(expf(__fsub_rn(a.v[k], total.max)), inv);
      g.v[k] = __fmul_rn(j * V + k == target ? __fsub_rn(p, 1.0f) : p, grad_scale);
    }
    d[j] = g;
  }
}

}  // namespace

void cross_entropy(int64_t rows, int64_t vocab, const float* logits, const int32_t* targets, float grad_scale,
                   float* losses, float* dlogits, cudaStream_t stream) {
  if (rows < 0 || vocab < 1 || rows >= (int64_t{1} << 31))
    throw Error("cross_entropy: unsupported shape [" + std::to_string(rows) + ", " + std::to_string(vocab) + "]");
  if (rows == 0) return;
  const unsigned blocks = static_cast<unsigned>(rows);
  if (vocab % 4 == 0 && aligned(logits, 16) && (dlogits == nullptr || aligned(dlogits, 16))) {
    cross_entropy_kernel<4><<<blocks, row_threads(vocab / 4, kMaxThreads), 0, stream>>>(vocab, logits, targets,
                                                                                        grad_scale, losses, dlogits);
  } else {
    cross_entropy_kernel<1>
        <<<blocks, row_threads(vocab, kMaxThreads), 0, stream>>>(vocab, logits, targets, grad_scale, losses, dlogits);
  }
  check_launch("cross_entropy");
}

}  // namespace fp8kit::cuda
