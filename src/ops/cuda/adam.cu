// Adam kernel: every operation rounded as on the CPU (explicit _rn intrinsics: no fused multiply-add
// contraction), so w, m and v match optim::Adam's bits for the same alpha. alpha's powers are taken
// in double and rounded, which is glibc powf's correctly rounded result. A grid of a few blocks per SM
// strides over the elements 4 at a time (16-byte loads where the buffers allow), so that the scalars'
// double-precision prologue runs once per block, not once per 256 elements: the update is a pass at
// memory bandwidth (28 bytes per parameter).
#include "ops/cuda/adam.h"

#include "ops/cuda/aligned.h"
#include "ops/cuda/round.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 256;

struct Scalars {
  float alpha, decay, one_minus_b1, one_minus_b2, epsilon;
};

// One element's update.
__device__ __forceinline__ void update(const Scalars& s, bool decays, float& w, float g, float& m, float& v) {
  m = __fadd_rn(m, __fmul_rn(__fsub_rn(g, m), s.one_minus_b1));
  v = __fadd_rn(v, __fmul_rn(__fsub_rn(__fmul_rn(g, g), v), s.one_minus_b2));
  w = __fsub_rn(__fmul_rn(w, decays ? s.decay : 1.0f), __fdiv_rn(__fmul_rn(m, s.alpha), __fadd_rn(__fsqrt_rn(v), s.epsilon)));
}

// vectors: w, g, m and v are 16-byte aligned (float4 loads of 4 elements), else scalar ones.
__global__ void __launch_bounds__(kThreads) update_kernel(ops::AdamOptions o, const float* iterations, float* w,
                                                          const float* g, float* m, float* v, int64_t n,
                                                          int64_t decayed, bool vectors) {
  // lr_t (the schedule, from the device's count), alpha and the weight decay's factor once per block
  // (two double-precision pows), shared.
  __shared__ float shared_alpha, shared_decay;
  if (threadIdx.x == 0) {
    const float t = __fadd_rn(*iterations, 1.0f);
    const float lr = static_cast<float>(ops::scheduled_learning_rate(o, static_cast<double>(t)));
    const float p1 = static_cast<float>(pow(static_cast<double>(o.beta1), static_cast<double>(t)));
    const float p2 = static_cast<float>(pow(static_cast<double>(o.beta2), static_cast<double>(t)));
    shared_alpha = __fdiv_rn(__fmul_rn(lr, __fsqrt_rn(__fsub_rn(1.0f, p2))), __fsub_rn(1.0f, p1));
    shared_decay = __fmaf_rn(-lr, o.weight_decay, 1.0f);  // the CPU's std::fma
  }
  __syncthreads();
  const Scalars s{shared_alpha, shared_decay, __fsub_rn(1.0f, o.beta1), __fsub_rn(1.0f, o.beta2), o.epsilon};
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t quads = vectors ? n / 4 : 0;
  for (int64_t q = first; q < quads; q += stride) {
    float4 wq = reinterpret_cast<float4*>(w)[q], mq = reinterpret_cast<float4*>(m)[q], vq = reinterpret_cast<float4*>(v)[q];
    const float4 gq = reinterpret_cast<const float4*>(g)[q];
    const int64_t i = 4 * q;
    update(s, i < decayed, wq.x, gq.x, mq.x, vq.x);
    update(s, i + 1 < decayed, wq.y, gq.y, mq.y, vq.y);
    update(s, i + 2 < decayed, wq.z, gq.z, mq.z, vq.z);
    update(s, i + 3 < decayed, wq.w, gq.w, mq.w, vq.w);
    reinterpret_cast<float4*>(w)[q] = wq, reinterpret_cast<float4*>(m)[q] = mq, reinterpret_cast<float4*>(v)[q] = vq;
  }
  for (int64_t i = 4 * quads + first; i < n; i += stride) update(s, i < decayed, w[i], g[i], m[i], v[i]);
}

__global__ void count_kernel(float* iterations, uint64_t* step_counter) {
  *iterations += 1.0f;
  if (step_counter != nullptr) *step_counter += 1;
}

}  // namespace

void adam_step(const ops::AdamOptions& options, float* iterations, float* w, const float* g, float* m, float* v,
               int64_t n, int64_t decayed, cudaStream_t stream, uint64_t* step_counter) {
  if (n > 0) {
    const unsigned blocks = strided_blocks((n + 3) / 4, kThreads);
    const bool vectors = aligned(w, 16) && aligned(g, 16) && aligned(m, 16) && aligned(v, 16);
    update_kernel<<<blocks, kThreads, 0, stream>>>(options, iterations, w, g, m, v, n, decayed, vectors);
    check_launch("adam_step");
  }
  count_kernel<<<1, 1, 0, stream>>>(iterations, step_counter);
  check_launch("adam_step (count)");
}

}  // namespace fp8kit::cuda
