// The FP8 attention forward's passes around cuDNN's (ops/sdpa.h, SdpaShape::fp8): the current
// per-tensor scales of q, k and v from their amaxes and the fixed ones of the probabilities and out,
// then out's E4M3 codes dequantized, with the CPU's float operations (the same scales and bits).
#include "ops/cuda/fp8_cast.cuh"
#include "ops/cuda/round.cuh"
#include "ops/cuda/scale.cuh"
#include "ops/cuda/sdpa.h"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {

namespace {

__global__ void sdpa_fp8_scales_kernel(float* s, float probability_scale, float out_scale) {
  const int i = threadIdx.x;
  if (i < 3) {  // numerics' current_scale(amax, E4M3): 1 for an amax that is 0, inf or NaN
    const float amax = s[kSdpaFp8Amax + i];
    s[kSdpaFp8Scale + i] = usable_amax(amax) ? scale_from_amax(amax, 448.0f, 0, false) : 1.0f;
    s[kSdpaFp8ScaleInv + i] = 1.0f / s[kSdpaFp8Scale + i];
  }
  __syncwarp();
  if (i == 3) {
    s[kSdpaFp8Scale + 3] = s[kSdpaFp8Scale + 2] * out_scale;
    s[kSdpaFp8ScaleInv + 3] = 1.0f / s[kSdpaFp8Scale + 3];
  }
  if (i == 4) s[kSdpaFp8Scale + 4] = probability_scale, s[kSdpaFp8ScaleInv + 4] = 1.0f / probability_scale;
}

template <typename T>
__global__ void sdpa_fp8_dequantize_kernel(const uint8_t* codes, const float* scale_inv, int64_t n, T* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n) return;
  const float x = decode_fp8<Fp8Format::E4M3>(codes[i]) * *scale_inv;
  if constexpr (sizeof(T) == 2) {
    out[i] = float_to_bf16(x);
  } else {
    out[i] = round_bf16(x);
  }
}

}  // namespace

void sdpa_fp8_scales(float* scales, cudaStream_t stream) {
  sdpa_fp8_scales_kernel<<<1, 32, 0, stream>>>(scales, ops::kSdpaFp8ProbabilityScale, ops::kSdpaFp8OutScale);
  check_launch("sdpa_fp8_scales");
}

void sdpa_fp8_dequantize(const uint8_t* codes, const float* scale_inv, int64_t n, bool bf16, void* out,
                         cudaStream_t stream) {
  constexpr int kThreads = 256;
  if (bf16) {
    sdpa_fp8_dequantize_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(codes, scale_inv, n,
                                                                                 static_cast<uint16_t*>(out));
  } else {
    sdpa_fp8_dequantize_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(codes, scale_inv, n,
                                                                                 static_cast<float*>(out));
  }
  check_launch("sdpa_fp8_dequantize");
}

}  // namespace fp8kit::cuda
