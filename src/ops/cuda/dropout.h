// Dropout on the GPU with the keep bits of ops/dropout.h's DropoutMask: the key comes from (seed,
// *step, site), where step lives in device memory so that a captured CUDA graph draws new masks on
// every replay. Element i of a tensor is kept exactly when DropoutMask(seed, step, site, rate).keep(i).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fp8kit::cuda {

// One dropout site. active == false: identity (evaluation, or rate 0).
struct DropoutSite {
  uint64_t seed = 0;
  const uint64_t* step = nullptr;  // device pointer to the step counter
  uint32_t site = 0;
  float rate = 0.0f;
  bool active = false;
};

// The mask's integer threshold (top 24 bits of the hash >= threshold: kept), as DropoutMask.
uint32_t dropout_threshold(float rate);

// out = keep ? x / keep_prob : 0 (bf16: quotient rounded, keep_prob = bf16(1 - rate)), as
// ops::dropout_forward; n < 2^32. out may alias x. Inactive: copies x to out when they differ.
void dropout_forward(const DropoutSite& site, bool bf16, const float* x, float* out, int64_t n, cudaStream_t stream);
// dx = keep ? dy / keep_prob : 0, as ops::dropout_backward.
void dropout_backward(const DropoutSite& site, bool bf16, const float* dy, float* dx, int64_t n, cudaStream_t stream);

}  // namespace fp8kit::cuda
