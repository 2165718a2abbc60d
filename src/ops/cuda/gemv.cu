// The decode GEMM kernel (gemv.h): a persistent grid of 8- or 16-warp blocks; each block copies the
// m rows of a into shared memory as bf16 (FP8 codes decoded: exact), then each warp takes columns j
// of y in turn and streams row j of b with 16-byte loads (8 bf16 or 16 FP8 codes; kUnroll loads per
// lane, the next ones in flight while it sums), every lane summing its k-slices in float32 in k
// order, and a butterfly adds the 32 lanes' sums.
#include "ops/cuda/gemv.h"

#include <cuda_fp8.h>

#include <algorithm>
#include <string>

#include "base/error.h"
#include "ops/cuda/aligned.h"
#include "ops/cuda/fp8_cast.cuh"
#include "runtime/cuda/check.h"
#include "runtime/cuda/dependent_launch.cuh"
#include "runtime/cuda/device_info.h"

namespace fp8kit::cuda {
namespace {

constexpr int kUnroll = 4;  // 16-byte loads of b in flight per lane

enum class Weight { Bf16, E4M3, E5M2 };

struct Params {
  int64_t n, k;
  const void* a;
  DType a_type;
  const uint4* b;
  void* y;
  bool y_f32;
  const float* a_scale;  // null: 1
  bool a_per_row;
  const float* b_scale;  // null: 1
  bool b_per_row;
  const void* bias;  // null: none
  bool bias_f32;
  bool constant_b;
};

// A streamed 16-byte load: b is read once, so it bypasses L1.
__device__ __forceinline__ uint4 load_streaming(const uint4* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

// The two bf16 values of a 32-bit word as floats (exact).
__device__ __forceinline__ float low_bf16(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float high_bf16(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }

// The two FP8 codes of a 16-bit word (low byte first) as floats, exactly (the hardware cvt to half).
template <Weight W>
__device__ __forceinline__ float2 decode_fp8x2(uint32_t codes) {
  constexpr __nv_fp8_interpretation_t kind = W == Weight::E4M3 ? __NV_E4M3 : __NV_E5M2;
  const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes & 0xFFFFu), kind);
  return __half22float2(__half2(raw));
}

// Four FP8 codes -> two words of bf16 pairs (exact: every FP8 value is a bf16).
template <Weight W>
__device__ __forceinline__ uint2 fp8x4_to_bf16(uint32_t codes) {
  const float2 lo = decode_fp8x2<W>(codes), hi = decode_fp8x2<W>(codes >> 16);
  return make_uint2(float_to_bf16(lo.x) | (static_cast<uint32_t>(float_to_bf16(lo.y)) << 16),
                    float_to_bf16(hi.x) | (static_cast<uint32_t>(float_to_bf16(hi.y)) << 16));
}

// acc[i] += a[i, e0 + t] * b[t] for the t of one 16-byte chunk of b, in k order (a: bf16 words in
// shared memory, row-major [M, k]).
template <int M, Weight W>
__device__ __forceinline__ void add_chunk(const uint4 chunk, const uint32_t* a, int64_t k, int64_t e0, float (&acc)[M]) {
  const uint32_t words[4] = {chunk.x, chunk.y, chunk.z, chunk.w};
  if constexpr (W == Weight::Bf16) {
#pragma unroll
    for (int i = 0; i < M; ++i) {
      const uint4 av = *reinterpret_cast<const uint4*>(a + (i * k + e0) / 2);
      const uint32_t aw[4] = {av.x, av.y, av.z, av.w};
#pragma unroll
      for (int w = 0; w < 4; ++w) {
        acc[i] = __fmaf_rn(low_bf16(aw[w]), low_bf16(words[w]), acc[i]);
        acc[i] = __fmaf_rn(high_bf16(aw[w]), high_bf16(words[w]), acc[i]);
      }
    }
  } else {
    float b[16];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float2 lo = decode_fp8x2<W>(words[w]), hi = decode_fp8x2<W>(words[w] >> 16);
      b[4 * w] = lo.x, b[4 * w + 1] = lo.y, b[4 * w + 2] = hi.x, b[4 * w + 3] = hi.y;
    }
#pragma unroll
    for (int i = 0; i < M; ++i) {
      const uint4* row = reinterpret_cast<const uint4*>(a + (i * k + e0) / 2);
      const uint4 a0 = row[0], a1 = row[1];
      const uint32_t aw[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
#pragma unroll
      for (int w = 0; w < 8; ++w) {
        acc[i] = __fmaf_rn(low_bf16(aw[w]), b[2 * w], acc[i]);
        acc[i] = __fmaf_rn(high_bf16(aw[w]), b[2 * w + 1], acc[i]);
      }
    }
  }
}

// v[u] = chunk at + 32 u of a row of b, zeros past its end.
__device__ __forceinline__ void load_batch(uint4 (&v)[kUnroll], const uint4* row, int64_t at, int64_t chunks) {
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) v[u] = at + 32 * u < chunks ? load_streaming(row + at + 32 * u) : make_uint4(0, 0, 0, 0);
}

// The sums of one column (every lane holds them after the butterfly): lane i writes row i, in the
// CPU's order: (sa * sb) * dot, then + bias, then y's rounding.
template <int M>
__device__ __forceinline__ void write_column(const Params& p, int64_t col, int lane, float (&acc)[M]) {
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) acc[i] = __fadd_rn(acc[i], __shfl_xor_sync(0xFFFFFFFFu, acc[i], offset));
  const float sb = p.b_scale != nullptr ? p.b_scale[p.b_per_row ? col : 0] : 1.0f;
  float bias = 0.0f;
  if (p.bias != nullptr)
    bias = p.bias_f32 ? static_cast<const float*>(p.bias)[col] : bf16_to_float(static_cast<const uint16_t*>(p.bias)[col]);
#pragma unroll
  for (int i = 0; i < M; ++i) {
    if (lane != i) continue;
    float v = acc[i];
    if (p.a_scale != nullptr || p.b_scale != nullptr) {
      const float sa = p.a_scale != nullptr ? p.a_scale[p.a_per_row ? i : 0] : 1.0f;
      v = __fmul_rn(__fmul_rn(sa, sb), v);
    }
    if (p.bias != nullptr) v = __fadd_rn(v, bias);
    const int64_t at = i * p.n + col;
    if (p.y_f32) {
      static_cast<float*>(p.y)[at] = v;
    } else {
      static_cast<uint16_t*>(p.y)[at] = float_to_bf16(v);
    }
  }
}

// A warp's work is a sequence of batches (kUnroll chunks per lane, 32 * kUnroll of a row) over its
// columns; the next batch's loads are issued before the current one is summed (and the first before
// a is copied in, and before the kernel before it has finished: a dependent launch), so that each
// lane keeps loads in flight across batches and columns.
template <int M, Weight W, int Warps>
__global__ void __launch_bounds__(32 * Warps) gemv_kernel(const Params p) {
  constexpr int64_t kPerChunk = W == Weight::Bf16 ? 8 : 16;  // elements of b per 16-byte load
  const int64_t chunks = p.k / kPerChunk, stride = static_cast<int64_t>(gridDim.x) * Warps;
  const int lane = static_cast<int>(threadIdx.x % 32);
  int64_t col = static_cast<int64_t>(blockIdx.x) * Warps + threadIdx.x / 32, base = 0;  // the batch in v
  uint4 v[kUnroll];
  if (!p.constant_b) wait_for_prior_grids();  // (else b's first loads overlap the kernel before)
  if (col < p.n) load_batch(v, p.b + col * chunks, base + lane, chunks);
  wait_for_prior_grids();
  allow_dependent_launch();

  extern __shared__ uint4 a_shared[];  // [M, k] bf16
  // a into shared memory, 8 values per thread and step.
  const int64_t groups = M * p.k / 8;
  for (int64_t g = threadIdx.x; g < groups; g += 32 * Warps) {
    if (p.a_type == DType::Bf16) {
      a_shared[g] = static_cast<const uint4*>(p.a)[g];
    } else {
      const uint2 codes = static_cast<const uint2*>(p.a)[g];
      const uint2 lo = p.a_type == DType::E4M3 ? fp8x4_to_bf16<Weight::E4M3>(codes.x) : fp8x4_to_bf16<Weight::E5M2>(codes.x);
      const uint2 hi = p.a_type == DType::E4M3 ? fp8x4_to_bf16<Weight::E4M3>(codes.y) : fp8x4_to_bf16<Weight::E5M2>(codes.y);
      a_shared[g] = make_uint4(lo.x, lo.y, hi.x, hi.y);
    }
  }
  __syncthreads();
  const uint32_t* a = reinterpret_cast<const uint32_t*>(a_shared);

  float acc[M];
#pragma unroll
  for (int i = 0; i < M; ++i) acc[i] = 0.0f;
  while (col < p.n) {  // col and base are the same in all lanes
    uint4 current[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) current[u] = v[u];
    const int64_t at = base + lane, current_col = col;
    base += 32 * kUnroll;
    const bool column_done = base >= chunks;
    if (column_done) base = 0, col += stride;
    if (col < p.n) load_batch(v, p.b + col * chunks, base + lane, chunks);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u)
      if (at + 32 * u < chunks) add_chunk<M, W>(current[u], a, p.k, (at + 32 * u) * kPerChunk, acc);
    if (column_done) {
      write_column<M>(p, current_col, lane, acc);
#pragma unroll
      for (int i = 0; i < M; ++i) acc[i] = 0.0f;
    }
  }
}

size_t shared_bytes(int64_t m, int64_t k) { return static_cast<size_t>(m * k) * 2; }

// How many blocks of gemv_kernel<M, W, Warps> an SM holds with `smem` bytes of a (the kernel allowed
// that much shared memory first).
template <int M, Weight W, int Warps>
int blocks_per_sm(size_t smem) {
  const auto kernel = gemv_kernel<M, W, Warps>;
  if (smem > 48 * 1024)
    FP8KIT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  int per_sm = 0;
  FP8KIT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * Warps, smem));
  return std::max(per_sm, 1);
}

// One block per Warps columns, at most as many as fit on the GPU at once (each loads a only once).
template <int M, Weight W, int Warps>
void launch_blocks(const Params& p, int per_sm, cudaStream_t stream) {
  const int64_t resident = static_cast<int64_t>(per_sm) * current_device_attribute(cudaDevAttrMultiProcessorCount);
  const auto blocks = static_cast<unsigned>(std::min((p.n + Warps - 1) / Warps, resident));
  launch_dependent(gemv_kernel<M, W, Warps>, dim3(blocks), dim3(32 * Warps), shared_bytes(M, p.k), stream, 1, p);
}

// Blocks of 8 warps, several per SM; where a's copy is so large that only one fits (m >= 5 at k =
// 14336), blocks of 16 warps, so that twice as many loads of b are in flight.
template <int M, Weight W>
void launch(const Params& p, cudaStream_t stream) {
  const size_t smem = shared_bytes(M, p.k);
  if (const int per_sm = blocks_per_sm<M, W, 8>(smem); per_sm > 1) return launch_blocks<M, W, 8>(p, per_sm, stream);
  launch_blocks<M, W, 16>(p, blocks_per_sm<M, W, 16>(smem), stream);
}

template <Weight W>
void launch_rows(int64_t m, const Params& p, cudaStream_t stream) {
  switch (m) {
    case 1: return launch<1, W>(p, stream);
    case 2: return launch<2, W>(p, stream);
    case 3: return launch<3, W>(p, stream);
    case 4: return launch<4, W>(p, stream);
    case 5: return launch<5, W>(p, stream);
    case 6: return launch<6, W>(p, stream);
    case 7: return launch<7, W>(p, stream);
    case 8: return launch<8, W>(p, stream);
  }
}
static_assert(kGemvMaxRows == 8, "launch_rows instantiates m = 1..8");

}  // namespace

bool gemv_fits(const GemmArgs& g) {
  const bool bf16 = g.a_type == DType::Bf16 && g.b_type == DType::Bf16;
  const bool fp8 = is_fp8(g.a_type) && is_fp8(g.b_type) && !(g.a_type == DType::E5M2 && g.b_type == DType::E5M2);
  const auto plain = [](ScaleMode mode) { return mode == ScaleMode::Scalar || mode == ScaleMode::OuterVec; };
  return g.m >= 1 && g.m <= kGemvMaxRows && g.n >= 1 && g.k >= 16 && g.k % 16 == 0 && (bf16 || fp8) &&
         (g.y_type == DType::Bf16 || g.y_type == DType::F32) && (fp8 || (g.a_scale_inv == nullptr && g.b_scale_inv == nullptr)) &&
         plain(g.a_scale_mode) && plain(g.b_scale_mode) && (g.epilogue == Epilogue::None || g.epilogue == Epilogue::Bias) &&
         (g.epilogue == Epilogue::None) == (g.bias == nullptr) && !g.accumulate && g.y != nullptr && aligned(g.a, 16) &&
         aligned(g.b, 16) && g.a != nullptr && g.b != nullptr &&
         shared_bytes(g.m, g.k) <= static_cast<size_t>(current_device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin));
}

void gemv(const GemmArgs& g, cudaStream_t stream) {
  if (!gemv_fits(g))
    throw Error("gemv: y[" + std::to_string(g.m) + "x" + std::to_string(g.n) + "] = a . b^T with k = " +
                std::to_string(g.k) + " (" + std::string(name(g.a_type)) + " x " + std::string(name(g.b_type)) +
                " -> " + std::string(name(g.y_type)) +
                ") is not a decode GEMM gemv runs (m <= 8, k a multiple of 16, 16-byte aligned operands, per "
                "tensor or per row scales, no GELU or accumulation): use GemmContext::gemm");
  const Params p{.n = g.n,
                 .k = g.k,
                 .a = g.a,
                 .a_type = g.a_type,
                 .b = static_cast<const uint4*>(g.b),
                 .y = g.y,
                 .y_f32 = g.y_type == DType::F32,
                 .a_scale = g.a_scale_inv,
                 .a_per_row = g.a_scale_mode == ScaleMode::OuterVec,
                 .b_scale = g.b_scale_inv,
                 .b_per_row = g.b_scale_mode == ScaleMode::OuterVec,
                 .bias = g.bias,
                 .bias_f32 = bias_type(g.a_type, g.y_type) == DType::F32,
                 .constant_b = g.constant_b};
  switch (g.b_type) {
    case DType::Bf16: return launch_rows<Weight::Bf16>(g.m, p, stream);
    case DType::E4M3: return launch_rows<Weight::E4M3>(g.m, p, stream);
    default: return launch_rows<Weight::E5M2>(g.m, p, stream);
  }
}

}  // namespace fp8kit::cuda
