// Greedy sampling kernel: a block per row; each thread the best (value, index) of the vectors it
// strides over (indices rising: strictly greater keeps the first), then a warp and a block reduction
// that prefers the larger value and, between equal ones, the smaller index.
#include "ops/cuda/sampling.h"

#include <string>

#include "base/error.h"
#include "ops/cuda/aligned.h"
#include "ops/cuda/fp8_cast.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 1024;

template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T e[V];
};

__device__ __forceinline__ float value_of(float v) { return v; }
__device__ __forceinline__ float value_of(uint16_t v) { return bf16_to_float(v); }

struct Best {
  float value;
  int32_t index;  // -1: none yet (every value NaN)
};

__device__ __forceinline__ Best better(Best a, Best b) {
  if (a.index < 0) return b;
  if (b.index < 0) return a;
  return b.value > a.value || (b.value == a.value && b.index < a.index) ? b : a;
}

__device__ __forceinline__ Best warp_best(Best b) {
  for (int o = 16; o > 0; o >>= 1) {
    const Best other{__shfl_xor_sync(0xFFFFFFFFu, b.value, o), __shfl_xor_sync(0xFFFFFFFFu, b.index, o)};
    b = better(b, other);
  }
  return b;
}

template <typename T, int V>
__global__ void __launch_bounds__(kThreads) argmax_kernel(int64_t n, const T* logits, int32_t* ids) {
  __shared__ Best partial[kThreads / 32];
  const int64_t r = blockIdx.x, vectors = n / V;
  const auto* row = reinterpret_cast<const Vec<T, V>*>(logits + r * n);
  Best best{0.0f, -1};
#pragma unroll 4
  for (int64_t j = threadIdx.x; j < vectors; j += kThreads) {
    const Vec<T, V> v = row[j];
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const float f = value_of(v.e[i]);
      if (!isnan(f) && (best.index < 0 || f > best.value)) best = {f, static_cast<int32_t>(j * V + i)};
    }
  }
  best = warp_best(best);
  if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = best;
  __syncthreads();
  if (threadIdx.x >= 32) return;
  best = warp_best(partial[threadIdx.x]);  // kThreads / 32 == 32 warps: one per lane
  if (threadIdx.x == 0) ids[r] = best.index < 0 ? 0 : best.index;
}

template <typename T, int V>
void launch(int64_t rows, int64_t n, const void* logits, int32_t* ids, cudaStream_t stream) {
  argmax_kernel<T, V><<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(n, static_cast<const T*>(logits), ids);
}

}  // namespace

void argmax_rows(int64_t rows, int64_t n, const void* logits, DType logits_type, int32_t* ids, cudaStream_t stream) {
  static_assert(kThreads == 32 * 32, "the block reduction gives each lane of warp 0 one warp's best");
  if (logits_type != DType::F32 && logits_type != DType::Bf16)
    throw Error("argmax_rows: logits must be f32 or bf16, got " + std::string(name(logits_type)));
  if (rows < 0 || n < 0 || rows >= (int64_t{1} << 31) || n > int64_t{0x7FFFFFFF})
    throw Error("argmax_rows: unsupported shape [" + std::to_string(rows) + ", " + std::to_string(n) + "]");
  if (rows == 0) return;
  if (logits_type == DType::F32) {
    n % 4 == 0 && aligned(logits, 16) ? launch<float, 4>(rows, n, logits, ids, stream)
                                      : launch<float, 1>(rows, n, logits, ids, stream);
  } else {
    n % 8 == 0 && aligned(logits, 16) ? launch<uint16_t, 8>(rows, n, logits, ids, stream)
                                      : launch<uint16_t, 1>(rows, n, logits, ids, stream);
  }
  check_launch("argmax_rows");
}

}  // namespace fp8kit::cuda
