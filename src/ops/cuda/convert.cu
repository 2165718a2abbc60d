// Element-wise conversion kernels: each thread converts groups of 4 elements (one vector load and
// one vector store when the pointers allow it), grid-stride over the array. The bf16 cast + transpose
// works on 32 x 32 tiles through shared memory (coalesced reads and writes both ways), one block per
// tile, several matrices per launch (a 1-D grid split among them, as quantize_fp8_batch).
#include "ops/cuda/convert.h"

#include <algorithm>
#include <string>

#include "base/error.h"
#include "ops/cuda/aligned.h"
#include "ops/cuda/batch.cuh"
#include "ops/cuda/fp8_cast.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 256;

// Enough blocks to fill the GPU several times over; the grid-stride loop covers the rest.
unsigned blocks_for(int64_t count) {
  const int64_t groups = (count + 3) / 4;
  return static_cast<unsigned>(std::clamp<int64_t>((groups + kThreads - 1) / kThreads, 1, 132 * 16));
}

// Calls f(i) for each element i of this thread's groups of 4; vector(i) for a whole aligned group.
template <typename Scalar, typename Vector>
__device__ __forceinline__ void for_each_group(int64_t count, bool vector_ok, Scalar scalar, Vector vector) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x * 4;
  for (int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * 4; i < count; i += stride) {
    if (vector_ok && i + 3 < count) {
      vector(i);
    } else {
      for (int64_t j = i; j < i + 4 && j < count; ++j) scalar(j);
    }
  }
}

template <Fp8Format F>
__global__ void dequantize_kernel(const uint8_t* q, int64_t count, const float* scale_inv, float* out, bool vector_ok) {
  const float s = *scale_inv;
  for_each_group(
      count, vector_ok, [&](int64_t j) { out[j] = decode_fp8<F>(q[j]) * s; },
      [&](int64_t i) {
        const uint32_t codes = *reinterpret_cast<const uint32_t*>(q + i);
        *reinterpret_cast<float4*>(out + i) =
            make_float4(decode_fp8<F>(codes & 0xFF) * s, decode_fp8<F>((codes >> 8) & 0xFF) * s,
                        decode_fp8<F>((codes >> 16) & 0xFF) * s, decode_fp8<F>(codes >> 24) * s);
      });
}

__global__ void float_to_bf16_kernel(const float* x, int64_t count, uint16_t* out, bool vector_ok) {
  for_each_group(
      count, vector_ok, [&](int64_t j) { out[j] = float_to_bf16(x[j]); },
      [&](int64_t i) {
        const float4 v = *reinterpret_cast<const float4*>(x + i);
        *reinterpret_cast<uint2*>(out + i) =
            make_uint2(float_to_bf16(v.x) | (static_cast<uint32_t>(float_to_bf16(v.y)) << 16),
                       float_to_bf16(v.z) | (static_cast<uint32_t>(float_to_bf16(v.w)) << 16));
      });
}

__global__ void bf16_to_float_kernel(const uint16_t* x, int64_t count, float* out, bool vector_ok) {
  for_each_group(
      count, vector_ok, [&](int64_t j) { out[j] = bf16_to_float(x[j]); },
      [&](int64_t i) {
        const uint2 h = *reinterpret_cast<const uint2*>(x + i);
        *reinterpret_cast<float4*>(out + i) = make_float4(bf16_to_float(h.x & 0xFFFFu), bf16_to_float(h.x >> 16),
                                                          bf16_to_float(h.y & 0xFFFFu), bf16_to_float(h.y >> 16));
      });
}

// Up to kMaxCasts matrices in one launch, a block per kTile x kTile tile.
constexpr int kMaxCasts = 16;
constexpr int kTile = 32, kTileRowsPerPass = 8;
struct Cast {
  const float* x;
  int64_t rows, cols;
  uint16_t* out;
  uint16_t* out_t;
  LinearEpilogue epilogue;
  bool gradient_active;
  EpilogueGradientArgs gradient;
};
using CastBatch = LaunchBatch<Cast, kMaxCasts>;

__global__ void __launch_bounds__(kTile * kTileRowsPerPass) cast_transpose_kernel(const __grid_constant__ CastBatch b) {
  __shared__ uint32_t tile[kTile][kTile + 1];  // bf16 bits; +1 against bank conflicts
  const BatchTile at = b.tile(blockIdx.x);
  const Cast& p = b.m[at.member];
  const int64_t c0 = at.x * kTile, r0 = at.y * kTile;
  const LinearEpilogue& e = p.epilogue;
  const DeviceDropoutMask mask = p.gradient.dropout.mask();
  for (int k = threadIdx.y; k < kTile; k += kTileRowsPerPass) {
    const int64_t r = r0 + k, c = c0 + threadIdx.x;
    if (r >= p.rows || c >= p.cols) continue;
    const int64_t i = r * p.cols + c;
    float v = p.x[i];
    if (e.bias != nullptr) {
      v = linear_epilogue(e, v, i, c);
      if (e.y != nullptr) e.y[i] = v;
    }
    if (p.gradient_active) v = p.gradient(v, i, mask);
    const uint16_t h = float_to_bf16(v);
    if (p.out != nullptr) p.out[i] = h;
    tile[k][threadIdx.x] = h;
  }
  if (p.out_t == nullptr) return;  // the same for the whole block
  __syncthreads();
  for (int k = threadIdx.y; k < kTile; k += kTileRowsPerPass) {
    const int64_t c = c0 + k, r = r0 + threadIdx.x;
    if (r < p.rows && c < p.cols) p.out_t[c * p.rows + r] = static_cast<uint16_t>(tile[threadIdx.x][k]);
  }
}

void check_args(const char* what, const void* in, int64_t count, const void* out) {
  if (count < 0) throw Error(std::string(what) + ": negative count " + std::to_string(count));
  if (count > 0 && (in == nullptr || out == nullptr))
    throw Error(std::string(what) + ": null input or output for " + std::to_string(count) + " elements");
}

}  // namespace

void dequantize_fp8(const uint8_t* q, int64_t count, Fp8Format format, const float* scale_inv, float* out,
                    cudaStream_t stream) {
  check_args("dequantize_fp8", q, count, out);
  if (scale_inv == nullptr) throw Error("dequantize_fp8: scale_inv is null (a device pointer to one float is required)");
  if (count == 0) return;
  const bool vector_ok = aligned(q, 4) && aligned(out, 16);
  if (format == Fp8Format::E4M3) {
    dequantize_kernel<Fp8Format::E4M3><<<blocks_for(count), kThreads, 0, stream>>>(q, count, scale_inv, out, vector_ok);
  } else {
    dequantize_kernel<Fp8Format::E5M2><<<blocks_for(count), kThreads, 0, stream>>>(q, count, scale_inv, out, vector_ok);
  }
  check_launch("dequantize_fp8");
}

void float_to_bf16(const float* x, int64_t count, uint16_t* out, cudaStream_t stream) {
  check_args("float_to_bf16", x, count, out);
  if (count == 0) return;
  float_to_bf16_kernel<<<blocks_for(count), kThreads, 0, stream>>>(x, count, out, aligned(x, 16) && aligned(out, 8));
  check_launch("float_to_bf16");
}

void float_to_bf16_transposed(std::span<const Bf16Cast> casts, cudaStream_t stream) {
  for (size_t start = 0; start < casts.size(); start += kMaxCasts) {
    CastBatch b{};
    const int count = static_cast<int>(std::min<size_t>(kMaxCasts, casts.size() - start));
    for (int t = 0; t < count; ++t) {
      const Bf16Cast& c = casts[start + t];
      const std::string what = "float_to_bf16_transposed: matrix " + std::to_string(start + t) + " (" +
                               std::to_string(c.rows) + "x" + std::to_string(c.cols) + ")";
      if (c.rows < 0 || c.cols < 0) throw Error(what + " has a negative shape");
      if (c.rows * c.cols > 0 && c.x == nullptr) throw Error(what + ": x is null");
      check_epilogue(c.epilogue, c.gradient, what);
      b.add_matrix({c.x, c.rows, c.cols, c.out, c.out_t, c.epilogue, c.gradient.active(),
                    epilogue_gradient_args(c.gradient, c.rows, c.cols, "float_to_bf16_transposed")},
                   c.rows, c.cols, kTile);
    }
    const unsigned blocks = b.blocks("float_to_bf16_transposed");
    if (blocks == 0) continue;
    cast_transpose_kernel<<<blocks, dim3(kTile, kTileRowsPerPass), 0, stream>>>(b);
    check_launch("float_to_bf16_transposed");
  }
}

void bf16_to_float(const uint16_t* x, int64_t count, float* out, cudaStream_t stream) {
  check_args("bf16_to_float", x, count, out);
  if (count == 0) return;
  bf16_to_float_kernel<<<blocks_for(count), kThreads, 0, stream>>>(x, count, out, aligned(x, 8) && aligned(out, 16));
  check_launch("bf16_to_float");
}

}  // namespace fp8kit::cuda
