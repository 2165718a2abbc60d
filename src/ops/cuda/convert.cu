// Element-wise conversion kernels: each thread converts groups of 4 elements (one vector load and
// one vector store when the pointers allow it), grid-stride over the array. The bf16 cast + transpose
// works on tiles through shared memory (coalesced reads and writes both ways; 64 x 64 with 4-element
// accesses where shapes and pointers allow, else 32 x 32), one block per tile, several matrices per
// launch (a 1-D grid split among them, as quantize_fp8_batch).
#include "ops/cuda/convert.h"

#include <algorithm>
#include <string>

#include "base/error.h"
#include "ops/cuda/aligned.h"
#include "ops/cuda/batch.cuh"
#include "ops/cuda/bias_sum.cuh"
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
  const uint16_t* x_bf16;  // instead of x: bf16 already (no epilogue or gradient)
  int64_t rows, cols;
  uint16_t* out;
  uint16_t* out_t;
  LinearEpilogue epilogue;
  bool gradient_active;
  EpilogueGradientArgs gradient;
  BiasSumArgs sum;  // the wide tile's summing launches only
};
using CastBatch = LaunchBatch<Cast, kMaxCasts>;

// Element i of p's matrix, and elements i .. i + 3 (16-byte aligned f32, 8-byte aligned bf16).
__device__ __forceinline__ float x_at(const Cast& p, int64_t i) {
  return p.x_bf16 != nullptr ? bf16_to_float(p.x_bf16[i]) : p.x[i];
}
__device__ __forceinline__ float4 x4_at(const Cast& p, int64_t i) {
  if (p.x_bf16 == nullptr) return *reinterpret_cast<const float4*>(p.x + i);
  const uint2 h = *reinterpret_cast<const uint2*>(p.x_bf16 + i);
  return make_float4(bf16_to_float(h.x & 0xFFFFu), bf16_to_float(h.x >> 16), bf16_to_float(h.y & 0xFFFFu),
                     bf16_to_float(h.y >> 16));
}

// Element i (column c) of a cast before its rounding to bf16: the producer's epilogue (its activated
// value into e.y where asked) and the output gradient's backward; a and b: SwiGLU's operands there
// (swiglu_operands'). SwiGlu false: a launch without SwiGLU's operands, whose elements' path then
// carries no SwiGLU branches (linear_epilogue<false>).
template <bool SwiGlu>
__device__ __forceinline__ float cast_value(const Cast& p, float v, float a, float b, int64_t i, int64_t c,
                                            const DeviceDropoutMask& mask) {
  const LinearEpilogue& e = p.epilogue;
  if (e.active<SwiGlu>()) {
    v = linear_epilogue<SwiGlu>(e, v, a, c, e.pre != nullptr ? e.pre + i : nullptr);
    if (e.y != nullptr) e.y[i] = v;
  }
  if (p.gradient_active)
    v = SwiGlu && p.gradient.swiglu != ops::SwiGluPart::None ? p.gradient.swiglu_gradient(v, a, b)
                                                             : p.gradient.activation_gradient(v, i, c, mask);
  return v;
}

template <bool SwiGlu>
__global__ void __launch_bounds__(kTile * kTileRowsPerPass) cast_transpose_kernel(const __grid_constant__ CastBatch b) {
  __shared__ uint32_t tile[kTile][kTile + 1];  // bf16 bits; +1 against bank conflicts
  const BatchTile at = b.tile(blockIdx.x);
  const Cast& p = b.m[at.member];
  const int64_t c0 = at.x * kTile, r0 = at.y * kTile;
  const DeviceDropoutMask mask = p.gradient.dropout.mask();
  for (int k = threadIdx.y; k < kTile; k += kTileRowsPerPass) {
    const int64_t r = r0 + k, c = c0 + threadIdx.x;
    if (r >= p.rows || c >= p.cols) continue;
    const int64_t i = r * p.cols + c;
    const SwiGluOperands s = swiglu_operands(p.epilogue, p.gradient);
    const uint16_t h = float_to_bf16(cast_value<SwiGlu>(p, x_at(p, i), s.first != nullptr ? s.first[i] : 0.0f,
                                                         s.second != nullptr ? s.second[i] : 0.0f, i, c, mask));
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

// Matrices whose rows and columns are multiples of 4 with 16-byte aligned x and 8-byte aligned outputs
// take 64 x 64 tiles, 4 elements per thread and access (float4 loads, 8-byte stores both ways): the
// 32 x 32 tiles' 2-byte stores reach about 60% of the copy bandwidth.
constexpr int kWideTile = 64, kWideThreads = 256;
// bf16 per transposed row in shared memory: 33 words, so that a warp's 2-byte writes down a column hit
// 2 threads per bank at most and its word reads along rows none.
constexpr int kWidePitch = kWideTile + 2;

// Tile (tx, ty) of p: 64 x 64, 4 elements per thread and access. sums: the tile's values before
// their rounding also go there, for the bias sums (cast_transpose_wide_kernel).
template <bool SwiGlu>
__device__ __forceinline__ void cast_wide_tile(const Cast& p, int64_t tx, int64_t ty, BiasSumTile* sums) {
  __shared__ __align__(4) uint16_t tile_t[kWideTile * kWidePitch];  // [column][row] of the tile
  const int64_t c0 = tx * kWideTile, r0 = ty * kWideTile;
  const DeviceDropoutMask mask = p.gradient.dropout.mask();
  const int group = threadIdx.x % 16, lane_row = threadIdx.x / 16;  // 16 threads x 4 columns per row
  for (int k = lane_row; k < kWideTile; k += kWideThreads / 16) {
    const int64_t r = r0 + k, c = c0 + 4 * group;
    if (r >= p.rows || c >= p.cols) continue;
    const int64_t i = r * p.cols + c;
    const float4 x = x4_at(p, i);
    const SwiGluOperands s = swiglu_operands(p.epilogue, p.gradient);
    const float4 a = s.first != nullptr ? *reinterpret_cast<const float4*>(s.first + i) : float4{};
    const float4 b = s.second != nullptr ? *reinterpret_cast<const float4*>(s.second + i) : float4{};
    const float v[4] = {cast_value<SwiGlu>(p, x.x, a.x, b.x, i, c, mask),
                        cast_value<SwiGlu>(p, x.y, a.y, b.y, i + 1, c + 1, mask),
                        cast_value<SwiGlu>(p, x.z, a.z, b.z, i + 2, c + 2, mask),
                        cast_value<SwiGlu>(p, x.w, a.w, b.w, i + 3, c + 3, mask)};
    if (sums != nullptr) put4(*sums, k, 4 * group, v);
    const uint16_t h[4] = {float_to_bf16(v[0]), float_to_bf16(v[1]), float_to_bf16(v[2]), float_to_bf16(v[3])};
    if (p.out != nullptr)
      *reinterpret_cast<uint2*>(p.out + i) = make_uint2(h[0] | (static_cast<uint32_t>(h[1]) << 16),
                                                        h[2] | (static_cast<uint32_t>(h[3]) << 16));
#pragma unroll
    for (int j = 0; j < 4; ++j) tile_t[(4 * group + j) * kWidePitch + k] = h[j];
  }
  if (p.out_t == nullptr && sums == nullptr) return;  // the same for the whole block
  __syncthreads();
  if (p.out_t == nullptr) return;
  for (int k = lane_row; k < kWideTile; k += kWideThreads / 16) {  // transposed row c0 + k, rows 4 group..
    const int64_t c = c0 + k, r = r0 + 4 * group;
    if (r >= p.rows || c >= p.cols) continue;
    const auto* words = reinterpret_cast<const uint32_t*>(tile_t + k * kWidePitch + 4 * group);
    *reinterpret_cast<uint2*>(p.out_t + c * p.rows + r) = make_uint2(words[0], words[1]);
  }
}

// Sums: each block takes one piece of a column tile (its tiles in row order) and adds its values'
// column sums (bias_sum.cuh) as it goes; otherwise one tile.
template <bool SwiGlu, bool Sums>
__global__ void __launch_bounds__(kWideThreads) cast_transpose_wide_kernel(const __grid_constant__ CastBatch b) {
  const BatchTile at = b.tile(blockIdx.x);
  const Cast& p = b.m[at.member];
  if constexpr (Sums) {
    static_assert(kBiasSumTileRows == kWideTile && kBiasSumTileCols == kWideTile, "a bias sum's tile is the wide tile");
    sum_piece(p.sum, p.rows, p.cols, at.x, at.y, [&](int64_t ty, BiasSumTile* sums) {
      cast_wide_tile<SwiGlu>(p, at.x, ty, sums);  // synchronised after the tile's puts
    });
  } else {
    cast_wide_tile<SwiGlu>(p, at.x, at.y, nullptr);
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
    const int count = static_cast<int>(std::min<size_t>(kMaxCasts, casts.size() - start));
    const bool wide = std::all_of(casts.begin() + start, casts.begin() + start + count, [](const Bf16Cast& c) {
      const SwiGluOperands s = swiglu_operands(c.epilogue, c.gradient);  // loaded 4 at a time too
      return c.rows % 4 == 0 && c.cols % 4 == 0 && aligned(c.x, 16) && aligned(c.x_bf16, 8) && aligned(s.first, 16) &&
             aligned(s.second, 16) && aligned(c.out, 8) && aligned(c.out_t, 8);
    });
    // The wide tile sums the bias gradients of all of them or none (bias_backward sums the others').
    const bool sums = wide && std::all_of(casts.begin() + start, casts.begin() + start + count, [](const Bf16Cast& c) {
      return tile_sums(c.bias_sum, c.rows, c.cols);
    });
    CastBatch b{};
    for (int t = 0; t < count; ++t) {
      const Bf16Cast& c = casts[start + t];
      const std::string what = "float_to_bf16_transposed: matrix " + std::to_string(start + t) + " (" +
                               std::to_string(c.rows) + "x" + std::to_string(c.cols) + ")";
      if (c.rows < 0 || c.cols < 0) throw Error(what + " has a negative shape");
      if (c.rows * c.cols > 0 && (c.x == nullptr) == (c.x_bf16 == nullptr))
        throw Error(what + ": give x or x_bf16, one of them");
      check_epilogue(c.epilogue, c.gradient, what);
      if (c.x_bf16 != nullptr && (c.epilogue.active() || c.gradient.active()))
        throw Error(what + ": a bf16 x takes no epilogue or gradient; convert it to f32 first");
      if (c.x_bf16 != nullptr && c.bias_sum.grad != nullptr && !sums)
        throw Error(what + ": a bf16 x's bias sum needs the wide tile (tile_sums, rows and columns multiples of 4 "
                           "and aligned pointers); convert it to f32 first");
      if (c.bias_sum.grad != nullptr && (c.bias_sum.workspace == nullptr || c.gradient.swiglu != ops::SwiGluPart::None))
        throw Error(what + ": a bias sum needs its workspace and a gradient other than SwiGLU's");
      const Cast cast{c.x, c.x_bf16, c.rows, c.cols, c.out, c.out_t, c.epilogue, c.gradient.active(),
                      epilogue_gradient_args(c.gradient, c.rows, c.cols, "float_to_bf16_transposed"),
                      sums ? bias_sum_args(c.bias_sum, c.rows) : BiasSumArgs{}};
      if (sums) {  // a block per (column tile, piece)
        b.add(cast, (c.cols + kWideTile - 1) / kWideTile, c.bias_sum.order.pieces(c.rows));
      } else {
        b.add_matrix(cast, c.rows, c.cols, wide ? kWideTile : kTile);
      }
    }
    if (std::all_of(casts.begin() + start, casts.begin() + start + count,
                    [&](const Bf16Cast& c) { return c.x == casts[start].x && c.x_bf16 == casts[start].x_bf16; }))
      b.interleave();
    const unsigned blocks = b.blocks("float_to_bf16_transposed");
    const bool swiglu = std::any_of(casts.begin() + start, casts.begin() + start + count, [](const Bf16Cast& c) {
      return swiglu_operands(c.epilogue, c.gradient).first != nullptr;
    });
    const dim3 tile(kTile, kTileRowsPerPass);
    if (blocks == 0) {  // empty matrices: only their bias sums (zeros) below
    } else if (sums) {
      cast_transpose_wide_kernel<false, true><<<blocks, kWideThreads, 0, stream>>>(b);
    } else if (wide && swiglu) {
      cast_transpose_wide_kernel<true, false><<<blocks, kWideThreads, 0, stream>>>(b);
    } else if (wide) {
      cast_transpose_wide_kernel<false, false><<<blocks, kWideThreads, 0, stream>>>(b);
    } else if (swiglu) {
      cast_transpose_kernel<true><<<blocks, tile, 0, stream>>>(b);
    } else {
      cast_transpose_kernel<false><<<blocks, tile, 0, stream>>>(b);
    }
    check_launch("float_to_bf16_transposed");
    for (int t = 0; t < count; ++t) {
      const Bf16Cast& c = casts[start + t];
      finish_bias_sum(c.bias_sum, sums, c.x, c.gradient, c.rows, c.cols, stream);
    }
  }
}

void bf16_to_float(const uint16_t* x, int64_t count, float* out, cudaStream_t stream) {
  check_args("bf16_to_float", x, count, out);
  if (count == 0) return;
  bf16_to_float_kernel<<<blocks_for(count), kThreads, 0, stream>>>(x, count, out, aligned(x, 8) && aligned(out, 16));
  check_launch("bf16_to_float");
}

}  // namespace fp8kit::cuda
