// The FP8 attention forward's passes around cuDNN's (ops/sdpa.h, SdpaShape::fp8): the current
// per-tensor scales of q, k and v from their amaxes and the fixed ones of the probabilities and out,
// then out's E4M3 codes dequantized, with the CPU's float operations (the same scales and bits).
#include "base/error.h"
#include "ops/cuda/aligned.h"
#include "ops/cuda/fp8_cast.cuh"
#include "ops/cuda/round.cuh"
#include "ops/cuda/scale.cuh"
#include "ops/cuda/sdpa.h"
#include "runtime/cuda/check.h"

#include <string>

namespace fp8kit::cuda {

namespace {

__global__ void sdpa_fp8_scales_kernel(float* s, float probability_scale, float out_scale) {
  const int i = threadIdx.x;
  if (i < 3) {  // numerics' current_scale(amax, E4M3)
    s[kSdpaFp8Scale + i] = current_scale(s[kSdpaFp8Amax + i], 448.0f, 0, false);
    s[kSdpaFp8ScaleInv + i] = 1.0f / s[kSdpaFp8Scale + i];
  }
  __syncwarp();
  if (i == 3) {
    s[kSdpaFp8Scale + 3] = s[kSdpaFp8Scale + 2] * out_scale;
    s[kSdpaFp8ScaleInv + 3] = 1.0f / s[kSdpaFp8Scale + 3];
  }
  if (i == 4) s[kSdpaFp8Scale + 4] = probability_scale, s[kSdpaFp8ScaleInv + 4] = 1.0f / probability_scale;
}

// Eight codes a thread (one 8-byte load; n is a multiple of 8: head_dim is of 16), as the CPU rounds.
template <typename T>
__global__ void sdpa_fp8_dequantize_kernel(const uint2* codes, const float* scale_inv, int64_t n8, T* out) {
  const int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (i >= n8) return;
  const uint2 c = codes[i];
  const float s = *scale_inv;
  alignas(16) T y[8];
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    const float x = decode_fp8<Fp8Format::E4M3>(static_cast<uint8_t>((j < 4 ? c.x : c.y) >> (8 * (j % 4)))) * s;
    if constexpr (sizeof(T) == 2) {
      y[j] = float_to_bf16(x);
    } else {
      y[j] = round_bf16(x);
    }
  }
  if constexpr (sizeof(T) == 2) {
    reinterpret_cast<uint4*>(out)[i] = *reinterpret_cast<const uint4*>(y);
  } else {
    reinterpret_cast<float4*>(out)[2 * i] = *reinterpret_cast<const float4*>(y);
    reinterpret_cast<float4*>(out)[2 * i + 1] = *reinterpret_cast<const float4*>(y + 4);
  }
}

}  // namespace

void sdpa_fp8_scales(float* scales, cudaStream_t stream) {
  sdpa_fp8_scales_kernel<<<1, 32, 0, stream>>>(scales, ops::kSdpaFp8ProbabilityScale, ops::kSdpaFp8OutScale);
  check_launch("sdpa_fp8_scales");
}

void sdpa_fp8_dequantize(const uint8_t* codes, const float* scale_inv, int64_t n, bool bf16, void* out,
                         cudaStream_t stream) {
  if (n % 8 != 0 || !aligned(codes, 8) || !aligned(out, 16))
    throw Error("sdpa_fp8_dequantize: " + std::to_string(n) + " codes (a multiple of 8, 8-byte aligned) into an "
                "output 16-byte aligned");
  constexpr int kThreads = 256;
  const int64_t n8 = n / 8;
  const auto* c = reinterpret_cast<const uint2*>(codes);
  if (bf16) {
    sdpa_fp8_dequantize_kernel<<<blocks_for(n8, kThreads), kThreads, 0, stream>>>(c, scale_inv, n8,
                                                                                  static_cast<uint16_t*>(out));
  } else {
    sdpa_fp8_dequantize_kernel<<<blocks_for(n8, kThreads), kThreads, 0, stream>>>(c, scale_inv, n8,
                                                                                  static_cast<float*>(out));
  }
  check_launch("sdpa_fp8_dequantize");
}

}  // namespace fp8kit::cuda
