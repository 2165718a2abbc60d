// Dropout forward/backward kernels (one thread per element).
#include "ops/cuda/dropout.h"

#include <cmath>
#include <string>

#include "base/error.h"
#include "ops/cuda/dropout.cuh"
#include "ops/cuda/round.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 256;

template <bool kBf16Quotient>
__global__ void dropout_kernel(DropoutArgs d, const float* in, float* out, uint32_t n) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = d.forward(in[i], i, kBf16Quotient);
}

void launch(const DropoutSite& s, bool bf16_quotient, bool bf16, const float* in, float* out, int64_t n,
            cudaStream_t stream, const char* what) {
  if (n <= 0) return;
  if (n > int64_t{UINT32_MAX}) throw Error(std::string(what) + ": tensors are limited to 2^32 elements");
  if (!s.active) {
    if (in != out) FP8KIT_CUDA_CHECK(cudaMemcpyAsync(out, in, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const DropoutArgs d = dropout_args(s, bf16, what, n);
  if (bf16_quotient) {
    dropout_kernel<true><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(d, in, out, static_cast<uint32_t>(n));
  } else {
    dropout_kernel<false><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(d, in, out, static_cast<uint32_t>(n));
  }
  check_launch(what);
}

}  // namespace

DropoutArgs dropout_args(const DropoutSite& site, bool bf16, const char* what, int64_t elements) {
  if (!site.active) return {};
  if (site.step == nullptr) throw Error(std::string(what) + ": an active dropout site needs the device step counter");
  if (elements > int64_t{UINT32_MAX})  // the mask is a hash of a 32-bit element index
    throw Error(std::string(what) + ": dropout is limited to 2^32 elements, got " + std::to_string(elements));
  return {site.seed, site.step, site.site, dropout_threshold(site.rate), ops::dropout_keep_prob(site.rate, bf16), true};
}

uint32_t dropout_threshold(float rate) {
  return static_cast<uint32_t>(std::llround(static_cast<double>(rate) * 16777216.0));
}

void dropout_forward(const DropoutSite& site, bool bf16, const float* x, float* out, int64_t n, cudaStream_t stream) {
  launch(site, bf16, bf16, x, out, n, stream, "dropout_forward");
}

void dropout_backward(const DropoutSite& site, bool bf16, const float* dy, float* dx, int64_t n, cudaStream_t stream) {
  launch(site, false, bf16, dy, dx, n, stream, "dropout_backward");
}

}  // namespace fp8kit::cuda
