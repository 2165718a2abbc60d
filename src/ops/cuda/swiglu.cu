// SwiGLU kernels: a thread per element, the CPU core's operations in its order, each rounded
// explicitly (no contraction), with the accurate expf.
#include "ops/cuda/swiglu.h"

#include <string>

#include "base/error.h"
#include "ops/cuda/round.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void forward_kernel(int64_t n, const float* gate, const float* up, bool bf16, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = gate[i];
  out[i] = maybe_bf16(__fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), up[i]), bf16);
}

__global__ void backward_kernel(int64_t n, const float* gate, const float* up, const float* dout, float* dgate,
                                float* dup) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = gate[i], u = up[i], d = dout[i];
  const float denominator = __fadd_rn(1.0f, expf(-g));
  const float sig = __fdiv_rn(1.0f, denominator), silu = __fdiv_rn(g, denominator);
  const float dsilu = __fmul_rn(sig, __fadd_rn(1.0f, __fmul_rn(g, __fsub_rn(1.0f, sig))));
  dgate[i] = __fmul_rn(__fmul_rn(d, u), dsilu);
  dup[i] = __fmul_rn(d, silu);
}

void check_count(int64_t n, const char* what) {
  if (n >= (int64_t{1} << 31) * kThreads)
    throw Error(std::string(what) + ": " + std::to_string(n) + " elements are too many for one launch");
}

}  // namespace

void swiglu_forward(int64_t n, const float* gate, const float* up, bool bf16, float* out, cudaStream_t stream) {
  if (n == 0) return;
  check_count(n, "swiglu_forward");
  forward_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(n, gate, up, bf16, out);
  check_launch("swiglu_forward");
}

void swiglu_backward(int64_t n, const float* gate, const float* up, const float* dout, float* dgate, float* dup,
                     cudaStream_t stream) {
  if (n == 0) return;
  check_count(n, "swiglu_backward");
  backward_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(n, gate, up, dout, dgate, dup);
  check_launch("swiglu_backward");
}

}  // namespace fp8kit::cuda
