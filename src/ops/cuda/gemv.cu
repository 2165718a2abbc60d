// The decode GEMM kernels (gemv.h). Both read b once with 16-byte streamed loads, the first of them
// issued before the kernel before has finished (a dependent launch) when b is a constant weight.
// - m = 1, CUDA cores (row_kernel): a persistent grid of 8- or 16-warp blocks copies a into shared
//   memory as bf16 (FP8 codes decoded: exact); each warp takes columns j of y in turn and streams row
//   j of b, 512 contiguous bytes per load instruction, every lane summing its k-slices in float32 in k
//   order, and a butterfly adds the 32 lanes' sums.
// - 2 <= m <= 8, or a row of a too long for shared memory, tensor cores (mma_kernel): a block per 16
//   columns of y whose 8 warps take every 8th step of k (64 FP8 or 32 bf16 elements), the m rows of a
//   the MMA's n. A lane loads 16 bytes of b's rows g and g + 8 (g = lane / 4) and of a's row g at the
//   same place, decodes FP8 codes to f16 pairs (exact) and feeds them to m16n8k16 MMAs: a dot
//   product does not care in which order it meets its k as long as a's and b's agree, so each lane's
//   16 bytes are its share of that many MMAs' k. On CUDA cores each element of b costs instructions
//   times m (FP8: 24 conversions and 16 FMAs per 16 bytes at m = 1); here a few per MMA for any m, so
//   b streams at memory speed for every m <= 8. At m = 1 its loads (8 rows x 64 bytes an instruction)
//   stream a little slower than row_kernel's (bench_cuda_gemv), hence two kernels.
#include "ops/cuda/gemv.h"

#include <cuda_fp8.h>

#include <algorithm>
#include <string>

#include "base/error.h"
#include "ops/cuda/aligned.h"
#include "ops/cuda/fp8_cast.cuh"
#include "ops/cuda/mma.cuh"
#include "runtime/cuda/check.h"
#include "runtime/cuda/dependent_launch.cuh"
#include "runtime/cuda/device_info.h"

namespace fp8kit::cuda {
namespace {

enum class Operand { Bf16, E4M3, E5M2 };

template <Operand O>
constexpr __nv_fp8_interpretation_t kFp8Kind = O == Operand::E4M3 ? __NV_E4M3 : __NV_E5M2;

// Elements of an operand per 16 bytes.
template <Operand O>
constexpr int kPer16 = O == Operand::Bf16 ? 8 : 16;

struct Params {
  int64_t m, n, k;
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

// y[i, col] from its dot product, in the CPU's order: (sa * sb) * dot, then + bias, then y's rounding.
__device__ __forceinline__ void write_y(const Params& p, int64_t i, int64_t col, float dot) {
  float v = dot;
  if (p.a_scale != nullptr || p.b_scale != nullptr) {
    const float sa = p.a_scale != nullptr ? p.a_scale[p.a_per_row ? i : 0] : 1.0f;
    const float sb = p.b_scale != nullptr ? p.b_scale[p.b_per_row ? col : 0] : 1.0f;
    v = __fmul_rn(__fmul_rn(sa, sb), v);
  }
  if (p.bias != nullptr)
    v = __fadd_rn(v, p.bias_f32 ? static_cast<const float*>(p.bias)[col]
                                : bf16_to_float(static_cast<const uint16_t*>(p.bias)[col]));
  const int64_t at = i * p.n + col;
  if (p.y_f32) {
    static_cast<float*>(p.y)[at] = v;
  } else {
    static_cast<uint16_t*>(p.y)[at] = float_to_bf16(v);
  }
}

// --- m = 1 on CUDA cores ---------------------------------------------------------------------------

constexpr int kRowUnroll = 4;  // 16-byte loads of b in flight per lane

// The two bf16 values of a 32-bit word as floats (exact).
__device__ __forceinline__ float low_bf16(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float high_bf16(uint32_t w) { return __uint_as_float(w & 0xFFFF0000u); }

// The two FP8 codes of a 16-bit word (low byte first) as floats, exactly (the hardware cvt to half).
template <Operand O>
__device__ __forceinline__ float2 decode_fp8x2(uint32_t codes) {
  const uint32_t pair = fp8x2_to_f16x2<kFp8Kind<O>>(codes);
  return __half22float2(*reinterpret_cast<const __half2*>(&pair));
}

// Four FP8 codes -> two words of bf16 pairs (exact: every FP8 value is a bf16).
template <Operand O>
__device__ __forceinline__ uint2 fp8x4_to_bf16(uint32_t codes) {
  const float2 lo = decode_fp8x2<O>(codes), hi = decode_fp8x2<O>(codes >> 16);
  return make_uint2(float_to_bf16(lo.x) | (static_cast<uint32_t>(float_to_bf16(lo.y)) << 16),
                    float_to_bf16(hi.x) | (static_cast<uint32_t>(float_to_bf16(hi.y)) << 16));
}

// acc += a[e0 + t] * b[t] for the t of one 16-byte chunk of b, in k order (a: bf16 words in shared
// memory).
template <Operand B>
__device__ __forceinline__ void add_chunk(const uint4 chunk, const uint32_t* a, int64_t e0, float& acc) {
  const uint32_t words[4] = {chunk.x, chunk.y, chunk.z, chunk.w};
  if constexpr (B == Operand::Bf16) {
    const uint4 av = *reinterpret_cast<const uint4*>(a + e0 / 2);
    const uint32_t aw[4] = {av.x, av.y, av.z, av.w};
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      acc = __fmaf_rn(low_bf16(aw[w]), low_bf16(words[w]), acc);
      acc = __fmaf_rn(high_bf16(aw[w]), high_bf16(words[w]), acc);
    }
  } else {
    float b[16];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      const float2 lo = decode_fp8x2<B>(words[w]), hi = decode_fp8x2<B>(words[w] >> 16);
      b[4 * w] = lo.x, b[4 * w + 1] = lo.y, b[4 * w + 2] = hi.x, b[4 * w + 3] = hi.y;
    }
    const uint4* row = reinterpret_cast<const uint4*>(a + e0 / 2);
    const uint4 a0 = row[0], a1 = row[1];
    const uint32_t aw[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
#pragma unroll
    for (int w = 0; w < 8; ++w) {
      acc = __fmaf_rn(low_bf16(aw[w]), b[2 * w], acc);
      acc = __fmaf_rn(high_bf16(aw[w]), b[2 * w + 1], acc);
    }
  }
}

// v[u] = chunk at + 32 u of a row of b, zeros past its end.
__device__ __forceinline__ void load_row_batch(uint4 (&v)[kRowUnroll], const uint4* row, int64_t at, int64_t chunks) {
#pragma unroll
  for (int u = 0; u < kRowUnroll; ++u)
    v[u] = at + 32 * u < chunks ? load_streaming(row + at + 32 * u) : make_uint4(0, 0, 0, 0);
}

// A warp's work is a sequence of batches (kRowUnroll chunks per lane, 32 * kRowUnroll of a row) over
// its columns; the next batch's loads are issued before the current one is summed (and the first
// before a is copied in), so that each lane keeps loads in flight across batches and columns.
template <Operand B, int Warps>
__global__ void __launch_bounds__(32 * Warps) row_kernel(const Params p) {
  const int64_t chunks = p.k / kPer16<B>, stride = static_cast<int64_t>(gridDim.x) * Warps;
  const int lane = static_cast<int>(threadIdx.x % 32);
  int64_t col = static_cast<int64_t>(blockIdx.x) * Warps + threadIdx.x / 32, base = 0;  // the batch in v
  uint4 v[kRowUnroll];
  if (!p.constant_b) wait_for_prior_grids();  // (else b's first loads overlap the kernel before)
  if (col < p.n) load_row_batch(v, p.b + col * chunks, base + lane, chunks);
  wait_for_prior_grids();
  allow_dependent_launch();

  extern __shared__ uint4 a_shared[];  // [k] bf16
  // a into shared memory, 8 values per thread and step.
  for (int64_t g = threadIdx.x; g < p.k / 8; g += 32 * Warps) {
    if (p.a_type == DType::Bf16) {
      a_shared[g] = static_cast<const uint4*>(p.a)[g];
    } else {
      const uint2 codes = static_cast<const uint2*>(p.a)[g];
      const bool e4m3 = p.a_type == DType::E4M3;
      const uint2 lo = e4m3 ? fp8x4_to_bf16<Operand::E4M3>(codes.x) : fp8x4_to_bf16<Operand::E5M2>(codes.x);
      const uint2 hi = e4m3 ? fp8x4_to_bf16<Operand::E4M3>(codes.y) : fp8x4_to_bf16<Operand::E5M2>(codes.y);
      a_shared[g] = make_uint4(lo.x, lo.y, hi.x, hi.y);
    }
  }
  __syncthreads();
  const uint32_t* a = reinterpret_cast<const uint32_t*>(a_shared);

  float acc = 0.0f;
  while (col < p.n) {  // col and base are the same in all lanes
    uint4 current[kRowUnroll];
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u) current[u] = v[u];
    const int64_t at = base + lane, current_col = col;
    base += 32 * kRowUnroll;
    const bool column_done = base >= chunks;
    if (column_done) base = 0, col += stride;
    if (col < p.n) load_row_batch(v, p.b + col * chunks, base + lane, chunks);
#pragma unroll
    for (int u = 0; u < kRowUnroll; ++u)
      if (at + 32 * u < chunks) add_chunk<B>(current[u], a, (at + 32 * u) * kPer16<B>, acc);
    if (column_done) {
#pragma unroll
      for (int offset = 16; offset > 0; offset /= 2) acc = __fadd_rn(acc, __shfl_xor_sync(0xFFFFFFFFu, acc, offset));
      if (lane == 0) write_y(p, 0, current_col, acc);
      acc = 0.0f;
    }
  }
}

size_t row_shared_bytes(int64_t k) { return static_cast<size_t>(k) * 2; }

// How many blocks of row_kernel<B, Warps> an SM holds with `smem` bytes of a (the kernel allowed that
// much shared memory first).
template <Operand B, int Warps>
int blocks_per_sm(size_t smem) {
  const auto kernel = row_kernel<B, Warps>;
  if (smem > 48 * 1024)
    FP8KIT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  int per_sm = 0;
  FP8KIT_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, 32 * Warps, smem));
  return std::max(per_sm, 1);
}

// One block per Warps columns, at most as many as fit on the GPU at once (each copies a only once).
template <Operand B, int Warps>
void launch_row_blocks(const Params& p, int per_sm, cudaStream_t stream) {
  const int64_t resident = static_cast<int64_t>(per_sm) * current_device_attribute(cudaDevAttrMultiProcessorCount);
  const auto blocks = static_cast<unsigned>(std::min((p.n + Warps - 1) / Warps, resident));
  launch_dependent(row_kernel<B, Warps>, dim3(blocks), dim3(32 * Warps), row_shared_bytes(p.k), stream, 1, p);
}

// Blocks of 8 warps, several per SM; where a's copy is so large that only one fits, of 16 warps, so
// that twice as many loads of b are in flight.
template <Operand B>
void launch_rows(const Params& p, cudaStream_t stream) {
  const size_t smem = row_shared_bytes(p.k);
  if (const int per_sm = blocks_per_sm<B, 8>(smem); per_sm > 1) return launch_row_blocks<B, 8>(p, per_sm, stream);
  launch_row_blocks<B, 16>(p, blocks_per_sm<B, 16>(smem), stream);
}

// --- 2 <= m <= 8 on tensor cores -------------------------------------------------------------------

constexpr int kMmaWarps = 8;    // warps of a block, each every 8th step of k
constexpr int kTile = 16;       // columns of y per block: the MMA's m
constexpr int kMmaUnroll = 4;   // steps of b's loads in flight per lane

// The MMA's operand pair of two elements (the low 16 bits of `pair`): bf16 as it is, FP8 as f16.
template <Operand O>
__device__ __forceinline__ uint32_t operand_pair(uint32_t pair) {
  if constexpr (O == Operand::Bf16) return pair;
  else return fp8x2_to_f16x2<kFp8Kind<O>>(pair);
}

// acc += the products of one step: 16 bytes of b's rows g and g + 8 (bg, bh) and of a's row g (av).
// Element pair q of a lane's 16 bytes is columns 2t, 2t + 1 (q even) or 2t + 8, 2t + 9 (q odd) of MMA
// q / 2.
template <Operand B, Operand A>
__device__ __forceinline__ void add_step(float (&acc)[4], uint4 bg, uint4 bh, uint4 av) {
  const uint32_t g[4] = {bg.x, bg.y, bg.z, bg.w}, h[4] = {bh.x, bh.y, bh.z, bh.w}, x[4] = {av.x, av.y, av.z, av.w};
  if constexpr (B == Operand::Bf16) {
#pragma unroll
    for (int j = 0; j < 2; ++j) {
      const uint32_t frag[4] = {g[2 * j], h[2 * j], g[2 * j + 1], h[2 * j + 1]};
      mma_bf16(acc, frag, x[2 * j], x[2 * j + 1]);
    }
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t frag[4] = {operand_pair<B>(g[j]), operand_pair<B>(h[j]), operand_pair<B>(g[j] >> 16),
                                operand_pair<B>(h[j] >> 16)};
      mma_f16(acc, frag, operand_pair<A>(x[j]), operand_pair<A>(x[j] >> 16));
    }
  }
}

// Block (16 columns from col0): warp w sums steps w, w + 8, ... of k (the block's warps side by side
// in each row, so that a row's 128-byte lines are read at once), kMmaUnroll steps of b in flight
// while the previous ones are summed; the warps' sums meet in shared memory, added in warp order.
template <Operand B, Operand A>
__global__ void __launch_bounds__(32 * kMmaWarps) mma_kernel(const Params p) {
  constexpr int64_t kStep = 4 * kPer16<B>;  // elements of k per step
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, g = lane / 4, t = lane % 4;
  const int64_t col0 = static_cast<int64_t>(blockIdx.x) * kTile;
  const int64_t steps = (p.k + kStep - 1) / kStep;
  const int64_t row_chunks = p.k / kPer16<B>;  // 16-byte chunks of a row of b (of a: the same k)
  const auto* a = static_cast<const uint4*>(p.a);
  // Chunk (step, t) of b's row r of the block, zeros past b's rows, k, or the warp's steps.
  const auto b_chunk = [&](int64_t r, int64_t step) {
    const int64_t c = step * 4 + t;
    return col0 + r < p.n && step < steps && c < row_chunks ? load_streaming(p.b + (col0 + r) * row_chunks + c)
                                                            : make_uint4(0, 0, 0, 0);
  };
  uint4 next[kMmaUnroll][2];
  const auto load_batch = [&](int64_t s0) {
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) {
      next[u][0] = b_chunk(g, s0 + u * kMmaWarps);
      next[u][1] = b_chunk(g + 8, s0 + u * kMmaWarps);
    }
  };
  if (!p.constant_b) wait_for_prior_grids();  // (else b's first loads overlap the kernel before)
  load_batch(warp);
  wait_for_prior_grids();
  allow_dependent_launch();

  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int64_t s0 = warp; s0 < steps; s0 += kMmaUnroll * kMmaWarps) {
    uint4 current[kMmaUnroll][2], x[kMmaUnroll];
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) {
      current[u][0] = next[u][0], current[u][1] = next[u][1];
      const int64_t s = s0 + u * kMmaWarps, c = s * 4 + t;
      x[u] = g < p.m && s < steps && c < row_chunks ? a[g * row_chunks + c] : make_uint4(0, 0, 0, 0);
    }
    load_batch(s0 + kMmaUnroll * kMmaWarps);
#pragma unroll
    for (int u = 0; u < kMmaUnroll; ++u) add_step<B, A>(acc, current[u][0], current[u][1], x[u]);
  }

  __shared__ float sums[kMmaWarps][kTile][8];  // [warp][column][row of a]
  sums[warp][g][2 * t] = acc[0], sums[warp][g][2 * t + 1] = acc[1];
  sums[warp][g + 8][2 * t] = acc[2], sums[warp][g + 8][2 * t + 1] = acc[3];
  __syncthreads();
  const int j = threadIdx.x / 8, i = threadIdx.x % 8;  // column, row of a
  if (threadIdx.x >= kTile * 8 || i >= p.m || col0 + j >= p.n) return;
  float dot = 0.0f;
#pragma unroll
  for (int w = 0; w < kMmaWarps; ++w) dot = __fadd_rn(dot, sums[w][j][i]);
  write_y(p, i, col0 + j, dot);
}

template <Operand B, Operand A>
void launch_mma(const Params& p, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((p.n + kTile - 1) / kTile);
  launch_dependent(mma_kernel<B, A>, dim3(blocks), dim3(32 * kMmaWarps), 0, stream, 1, p);
}

// Whether row_kernel runs a product of these rows (its copy of a fits in shared memory).
bool rows_on_cuda_cores(int64_t m, int64_t k) {
  return m == 1 &&
         row_shared_bytes(k) <= static_cast<size_t>(current_device_attribute(cudaDevAttrMaxSharedMemoryPerBlockOptin));
}

}  // namespace

bool gemv_fits(const GemmArgs& g) {
  const bool bf16 = g.a_type == DType::Bf16 && g.b_type == DType::Bf16;
  const bool fp8 = is_fp8(g.a_type) && is_fp8(g.b_type) && !(g.a_type == DType::E5M2 && g.b_type == DType::E5M2);
  const auto plain = [](ScaleMode mode) { return mode == ScaleMode::Scalar || mode == ScaleMode::OuterVec; };
  return g.m >= 1 && g.m <= kGemvMaxRows && g.n >= 1 && g.n / kTile < (int64_t{1} << 31) && g.k >= 16 &&
         g.k % 16 == 0 && (bf16 || fp8) && (g.y_type == DType::Bf16 || g.y_type == DType::F32) &&
         (fp8 || (g.a_scale_inv == nullptr && g.b_scale_inv == nullptr)) && plain(g.a_scale_mode) &&
         plain(g.b_scale_mode) && (g.epilogue == Epilogue::None || g.epilogue == Epilogue::Bias) &&
         (g.epilogue == Epilogue::None) == (g.bias == nullptr) && !g.accumulate && g.y != nullptr &&
         aligned(g.a, 16) && aligned(g.b, 16) && g.a != nullptr && g.b != nullptr;
}

void gemv(const GemmArgs& g, cudaStream_t stream) {
  if (!gemv_fits(g))
    throw Error("gemv: y[" + std::to_string(g.m) + "x" + std::to_string(g.n) + "] = a . b^T with k = " +
                std::to_string(g.k) + " (" + std::string(name(g.a_type)) + " x " + std::string(name(g.b_type)) +
                " -> " + std::string(name(g.y_type)) +
                ") is not a decode GEMM gemv runs (m <= 8, k a multiple of 16, 16-byte aligned operands, per "
                "tensor or per row scales, no GELU or accumulation): use GemmContext::gemm");
  const Params p{.m = g.m,
                 .n = g.n,
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
  if (rows_on_cuda_cores(g.m, g.k)) {
    switch (g.b_type) {
      case DType::Bf16: return launch_rows<Operand::Bf16>(p, stream);
      case DType::E4M3: return launch_rows<Operand::E4M3>(p, stream);
      default: return launch_rows<Operand::E5M2>(p, stream);
    }
  }
  const bool a_e4m3 = g.a_type == DType::E4M3;
  switch (g.b_type) {
    case DType::Bf16: return launch_mma<Operand::Bf16, Operand::Bf16>(p, stream);
    case DType::E4M3:
      return a_e4m3 ? launch_mma<Operand::E4M3, Operand::E4M3>(p, stream)
                    : launch_mma<Operand::E4M3, Operand::E5M2>(p, stream);
    default: return launch_mma<Operand::E5M2, Operand::E4M3>(p, stream);  // (E5M2 x E5M2 does not fit)
  }
}

}  // namespace fp8kit::cuda
