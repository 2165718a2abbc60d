// Calibration statistics kernel: thread j of block (bx, by) owns a vector of V columns (j = bx 256 + t)
// and walks rows by 64 .. by 64 + 63, 4 rows' loads in flight, keeping its columns' maxima as ordered
// bits and counting magnitudes in the block's shared histogram; then one atomicMax per column and one
// atomicAdd per non-empty bin.
#include "ops/cuda/activation_stats.h"

#include <string>

#include "base/error.h"
#include "numerics/histogram.h"
#include "ops/cuda/aligned.h"
#include "ops/cuda/fp8_cast.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kBlockRows = 64;
constexpr int kInFlight = 4;  // rows loaded before the first is counted

template <typename T, int V>
struct alignas(sizeof(T) * V) Vec {
  T e[V];
};

__device__ __forceinline__ uint32_t bits_of(float v) { return __float_as_uint(v); }
__device__ __forceinline__ uint32_t bits_of(uint16_t v) { return static_cast<uint32_t>(v) << 16; }

template <typename T, int V>
__global__ void __launch_bounds__(kThreads)
    stats_kernel(int64_t rows, int64_t cols, const T* x, float* channel_amax, int32_t* histogram) {
  __shared__ int32_t bins[kHistogramBins];
  const bool counting = histogram != nullptr;
  if (counting) {
    for (int b = threadIdx.x; b < kHistogramBins; b += kThreads) bins[b] = 0;
    __syncthreads();
  }
  const int64_t j = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;  // the thread's vector
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * kBlockRows;
  const int64_t r1 = rows < r0 + kBlockRows ? rows : r0 + kBlockRows;
  if (j < cols / V) {
    const auto* column = reinterpret_cast<const Vec<T, V>*>(x + j * V);
    const int64_t stride = cols / V;  // vectors per row
    uint32_t amax[V] = {};
    for (int64_t r = r0; r < r1; r += kInFlight) {
      Vec<T, V> v[kInFlight];
#pragma unroll
      for (int k = 0; k < kInFlight; ++k)
        if (r + k < r1) v[k] = column[(r + k) * stride];
#pragma unroll
      for (int k = 0; k < kInFlight; ++k) {
        if (r + k >= r1) break;
#pragma unroll
        for (int i = 0; i < V; ++i) {
          const uint32_t magnitude = amax_bits(bits_of(v[k].e[i]));  // NaN: 0
          amax[i] = max(amax[i], magnitude);
          const bool nan = (bits_of(v[k].e[i]) & 0x7FFFFFFFu) > 0x7F800000u;
          if (counting && !nan) atomicAdd(&bins[histogram_bin(__uint_as_float(magnitude))], 1);
        }
      }
    }
#pragma unroll
    for (int i = 0; i < V; ++i)
      if (amax[i] > 0) atomicMax(reinterpret_cast<unsigned int*>(channel_amax + j * V + i), amax[i]);
  }
  if (counting) {
    __syncthreads();
    for (int b = threadIdx.x; b < kHistogramBins; b += kThreads)
      if (bins[b] != 0) atomicAdd(histogram + b, bins[b]);
  }
}

template <typename T, int V>
void launch(int64_t rows, int64_t cols, const void* x, float* channel_amax, int32_t* histogram, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((cols / V + kThreads - 1) / kThreads),
                  static_cast<unsigned>((rows + kBlockRows - 1) / kBlockRows));
  stats_kernel<T, V><<<grid, kThreads, 0, stream>>>(rows, cols, static_cast<const T*>(x), channel_amax, histogram);
}

}  // namespace

void accumulate_activation_stats(int64_t rows, int64_t cols, const void* x, DType x_type, float* channel_amax,
                                 int32_t* histogram, cudaStream_t stream) {
  if (x_type != DType::F32 && x_type != DType::Bf16)
    throw Error("accumulate_activation_stats: x must be f32 or bf16, got " + std::string(name(x_type)));
  if (rows < 0 || cols < 0 || (rows + kBlockRows - 1) / kBlockRows > 65535)
    throw Error("accumulate_activation_stats: unsupported shape [" + std::to_string(rows) + ", " +
                std::to_string(cols) + "] (at most 65535 x 64 rows a call)");
  if (rows == 0 || cols == 0) return;
  const size_t element = x_type == DType::F32 ? 4 : 2;
  const bool vector = (cols * static_cast<int64_t>(element)) % 16 == 0 && aligned(x, 16);
  if (x_type == DType::F32) {
    vector ? launch<float, 4>(rows, cols, x, channel_amax, histogram, stream)
           : launch<float, 1>(rows, cols, x, channel_amax, histogram, stream);
  } else {
    vector ? launch<uint16_t, 8>(rows, cols, x, channel_amax, histogram, stream)
           : launch<uint16_t, 1>(rows, cols, x, channel_amax, histogram, stream);
  }
  check_launch("accumulate_activation_stats");
}

}  // namespace fp8kit::cuda
