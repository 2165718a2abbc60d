// fill_normal's kernel: a grid-stride loop over groups of 8 elements, each element from
// ops/normal_value.h (the CPU's text), stored 16 bytes at a time (f32: two vectors).
#include "ops/cuda/init.h"

#include <algorithm>
#include <string>

#include "base/error.h"
#include "ops/cuda/aligned.h"
#include "ops/cuda/fp8_cast.cuh"
#include "ops/normal_value.h"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kGroup = 8;
constexpr unsigned kMaxBlocks = 132 * 16;  // enough to fill an H100; threads loop beyond

__device__ __forceinline__ void store(float* out, int64_t i, float v) { out[i] = v; }
__device__ __forceinline__ void store(uint16_t* out, int64_t i, float v) { out[i] = float_to_bf16(v); }

template <typename T>
__global__ void __launch_bounds__(kThreads) fill_kernel(int64_t n, T* out, float stddev, uint64_t seed, bool vector) {
  const int64_t groups = (n + kGroup - 1) / kGroup;
  for (int64_t g = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; g < groups;
       g += static_cast<int64_t>(gridDim.x) * kThreads) {
    const int64_t i0 = g * kGroup;
    float v[kGroup];
#pragma unroll
    for (int k = 0; k < kGroup; ++k) v[k] = __fmul_rn(ops::normal::value(seed, static_cast<uint64_t>(i0 + k)), stddev);
    if (vector && i0 + kGroup <= n) {
      if constexpr (sizeof(T) == 4) {
        float4* dst = reinterpret_cast<float4*>(out + i0);
        dst[0] = make_float4(v[0], v[1], v[2], v[3]);
        dst[1] = make_float4(v[4], v[5], v[6], v[7]);
      } else {
        uint32_t w[kGroup / 2];
#pragma unroll
        for (int k = 0; k < kGroup / 2; ++k)
          w[k] = float_to_bf16(v[2 * k]) | (static_cast<uint32_t>(float_to_bf16(v[2 * k + 1])) << 16);
        *reinterpret_cast<uint4*>(out + i0) = make_uint4(w[0], w[1], w[2], w[3]);
      }
    } else {
#pragma unroll
      for (int k = 0; k < kGroup; ++k)
        if (i0 + k < n) store(out, i0 + k, v[k]);
    }
  }
}

}  // namespace

void fill_normal(int64_t n, void* out, DType type, float stddev, uint64_t seed, cudaStream_t stream) {
  if (type != DType::F32 && type != DType::Bf16)
    throw Error("fill_normal: the tensor must be f32 or bf16, got " + std::string(name(type)));
  if (n <= 0) return;
  const int64_t groups = (n + kGroup - 1) / kGroup;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((groups + kThreads - 1) / kThreads, kMaxBlocks));
  const bool vector = aligned(out, 16);
  if (type == DType::F32) {
    fill_kernel<float><<<blocks, kThreads, 0, stream>>>(n, static_cast<float*>(out), stddev, seed, vector);
  } else {
    fill_kernel<uint16_t><<<blocks, kThreads, 0, stream>>>(n, static_cast<uint16_t*>(out), stddev, seed, vector);
  }
  check_launch("fill_normal");
}

}  // namespace fp8kit::cuda
