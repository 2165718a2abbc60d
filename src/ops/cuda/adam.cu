// Adam kernel: one thread per element, every operation rounded as on the CPU (explicit _rn
// intrinsics: no fused multiply-add contraction), so w, m and v match optim::Adam's bits for the same
// alpha. alpha's powers are taken in double and rounded, which is glibc powf's correctly rounded result.
#include "ops/cuda/adam.h"

#include "ops/cuda/round.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void update_kernel(ops::AdamOptions o, const float* iterations, float* w, const float* g, float* m,
                              float* v, int64_t n, int64_t decayed) {
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
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float alpha = shared_alpha, decay = i < decayed ? shared_decay : 1.0f;
  const float one_minus_b1 = __fsub_rn(1.0f, o.beta1), one_minus_b2 = __fsub_rn(1.0f, o.beta2);
  const float gi = g[i];
  const float mi = __fadd_rn(m[i], __fmul_rn(__fsub_rn(gi, m[i]), one_minus_b1));
  const float vi = __fadd_rn(v[i], __fmul_rn(__fsub_rn(__fmul_rn(gi, gi), v[i]), one_minus_b2));
  m[i] = mi;
  v[i] = vi;
  w[i] = __fsub_rn(__fmul_rn(w[i], decay), __fdiv_rn(__fmul_rn(mi, alpha), __fadd_rn(__fsqrt_rn(vi), o.epsilon)));
}

__global__ void count_kernel(float* iterations, uint64_t* step_counter) {
  *iterations += 1.0f;
  if (step_counter != nullptr) *step_counter += 1;
}

}  // namespace

void adam_step(const ops::AdamOptions& options, float* iterations, float* w, const float* g, float* m, float* v,
               int64_t n, int64_t decayed, cudaStream_t stream, uint64_t* step_counter) {
  if (n > 0) {
    update_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(options, iterations, w, g, m, v, n, decayed);
    check_launch("adam_step");
  }
  count_kernel<<<1, 1, 0, stream>>>(iterations, step_counter);
  check_launch("adam_step (count)");
}

}  // namespace fp8kit::cuda
