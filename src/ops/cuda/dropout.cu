// Dropout forward/backward kernels (one thread per element).
#include "ops/cuda/dropout.h"

#include <cmath>
#include <string>

#include "base/error.h"
#include "ops/cuda/check.h"
#include "ops/cuda/dropout.cuh"
#include "ops/cuda/round.cuh"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 256;

template <bool kBf16Quotient>
__global__ void dropout_kernel(uint64_t seed, const uint64_t* step, uint32_t site, uint32_t threshold, float keep,
                               const float* in, float* out, uint32_t n) {
  const uint32_t i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const DeviceDropoutMask mask(seed, *step, site, threshold);
  const float q = in[i] / keep;
  out[i] = mask.apply(kBf16Quotient ? round_bf16(q) : q, i);
}

void launch(const DropoutSite& s, bool bf16_quotient, bool bf16, const float* in, float* out, int64_t n,
            cudaStream_t stream, const char* what) {
  if (n <= 0) return;
  if (n > int64_t{UINT32_MAX}) throw Error(std::string(what) + ": tensors are limited to 2^32 elements");
  if (!s.active) {
    if (in != out) FP8KIT_CUDA_CHECK(cudaMemcpyAsync(out, in, n * sizeof(float), cudaMemcpyDeviceToDevice, stream));
    return;
  }
  if (s.step == nullptr) throw Error(std::string(what) + ": an active dropout site needs the device step counter");
  const float keep = ops::dropout_keep_prob(s.rate, bf16);
  const uint32_t threshold = dropout_threshold(s.rate);
  if (bf16_quotient) {
    dropout_kernel<true><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(s.seed, s.step, s.site, threshold, keep, in,
                                                                            out, static_cast<uint32_t>(n));
  } else {
    dropout_kernel<false><<<blocks_for(n, kThreads), kThreads, 0, stream>>>(s.seed, s.step, s.site, threshold, keep,
                                                                             in, out, static_cast<uint32_t>(n));
  }
  check_launch(what);
}

}  // namespace

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
