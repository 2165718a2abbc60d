// The short-k FP8 GEMM (resident_gemm.h). A persistent grid of clusters of two blocks walks units of
// (128 rows, a run of 128-column tiles); the cluster's two blocks take neighbouring row blocks and the
// same columns. Per block, one thread of a producer warpgroup loads the unit's rows of a into shared
// memory once (every 128 of k a 128 x 128 swizzled tile: the whole of k stays resident; a bf16 a is
// quantized into that layout by the math warps themselves), then streams
// b's 128 x 128 k-slices of each column tile through a ring of stages, half of each slice loaded by
// each block and multicast to both (L2 serves b's bytes once per pair). The math warpgroups take the
// column tiles in turns: the even tiles are warpgroup 0's, the odd ones warpgroup 1's, each tile's
// 128 x 128 accumulator in its warpgroup's registers (two wgmma m64n128k32 per 32 of k). A named
// barrier hands the tensor cores from one to the other once a tile's wgmmas are issued, so the
// epilogue of one tile (scales, bias, GELU, conversion, stores) overlaps the next tile's products.
// Stores go out in 8- or 16-byte row chunks after an exchange within each quad of lanes (the
// fragment holds two columns of every eight). Instruction forms: the PTX ISA; the schedule follows
// CUTLASS's KernelTmaWarpSpecializedPingpong, the resident a is this kernel's own.
#include "ops/cuda/resident_gemm.h"

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <algorithm>
#include <mutex>

#include "base/error.h"
#include "ops/activation.h"
#include "ops/cuda/aligned.h"
#include "ops/cuda/fp8_cast.cuh"
#include "ops/cuda/sm90.cuh"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device_info.h"

namespace fp8kit::cuda {
namespace {

using namespace sm90;

constexpr int kBlockM = 128, kBlockN = 128, kBlockK = 128;
constexpr int kTileBytes = kBlockM * kBlockK;  // one 128-wide slice of k of a's rows, or one stage of b
constexpr int kMathThreads = 256, kThreads = kMathThreads + 128;
constexpr int kCluster = 2;  // neighbouring row blocks, the same column tiles: b multicast to both
constexpr int kMaxStages = 8, kMinStages = 3;

// Shared memory, from a 1024-byte aligned base (128-byte swizzled tiles need it): a's k_blocks tiles,
// b's stages, then the stages' full and empty barriers, a's per tile (loaded) and a's released.
struct Layout {
  int k_blocks = 0, stages = 0;
  size_t bytes = 0;
};
Layout layout(int64_t k, size_t shared_optin) {
  Layout l;
  l.k_blocks = static_cast<int>((k + kBlockK - 1) / kBlockK);
  const size_t fixed = 1024 + static_cast<size_t>(l.k_blocks) * (kTileBytes + 8) + 8;
  const size_t per_stage = kTileBytes + 2 * 8;
  l.stages = shared_optin > fixed ? static_cast<int>(std::min<size_t>(kMaxStages, (shared_optin - fixed) / per_stage)) : 0;
  l.bytes = fixed + static_cast<size_t>(l.stages) * per_stage;
  return l;
}

enum class Out { E4M3, Bf16, F32 };

struct Params {
  const __nv_bfloat16* a_bf16;  // bf16 a, quantized here at a_scale (then a_scale_inv is null); else null
  const float* a_scale;
  const float* a_scale_inv;  // Scalar: one float (null = 1); OuterVec: one per row of a
  const float* b_scale_inv;  // likewise per row of b (column of y)
  bool vector_scales;  // OuterVec x OuterVec
  const __nv_bfloat16* bias;  // [n] or null
  const float* y_scale;  // E4M3 y: codes of y_scale * result
  void* y;
  int m, n, k, k_blocks, stages;
  int n_tiles, chunk_tiles, n_chunks, units;  // a unit: a pair of row blocks x a chunk of column tiles
};

// Unit u's row-block pair and its first column tile; unit_end is the tile past its last. The math
// warps' loop recomputes the end from the parameters rather than holding it: with one register fewer
// across the loop the epilogue keeps everything in registers (held, it was spilled and reloaded after
// every tile, behind the tile's stores).
__device__ __forceinline__ void unit_of(const Params& p, int u, int& pair, int& first) {
  pair = u / p.n_chunks;
  first = u % p.n_chunks * p.chunk_tiles;
}
__device__ __forceinline__ int unit_end(const Params& p, int first) { return min(first + p.chunk_tiles, p.n_tiles); }

// A position in the ring of b's stages: the same sequence of k-slices in both blocks and all roles.
struct Ring {
  int stages, stage = 0;
  uint32_t phase = 0;  // the stage's fill, modulo 2, as its barriers count
  __device__ __forceinline__ void advance() {
    if (++stage == stages) stage = 0, phase ^= 1;
  }
};

// The math warpgroups' turns at the tensor cores: named barriers 1 and 2 (__syncthreads is 0), each
// met by the 128 threads of the warpgroup whose turn it is and the 128 of the one handing it over.
__device__ __forceinline__ void wait_turn(int group) { asm volatile("bar.sync %0, %1;" ::"r"(1 + group), "n"(kMathThreads) : "memory"); }
__device__ __forceinline__ void hand_turn(int group) { asm volatile("bar.arrive %0, %1;" ::"r"(1 + group), "n"(kMathThreads) : "memory"); }

// The quad's (4 lanes') 4 x 4 matrix of words transposed: lane q holds e[j] = E[q][j] and ends with
// e[r] = E[r][q]. First lanes q and q ^ 1 swap words so that each pair (e[2i], e[2i + 1]) holds one
// column of two rows; then lanes q and q ^ 2 swap pairs.
__device__ __forceinline__ void quad_transpose(uint32_t (&e)[4], int q) {
  const bool odd = q & 1, high = q & 2;
#pragma unroll
  for (int i = 0; i < 2; ++i) {
    const uint32_t got = __shfl_xor_sync(0xFFFFFFFFu, odd ? e[2 * i] : e[2 * i + 1], 1);
    if (odd) {
      e[2 * i] = got;
    } else {
      e[2 * i + 1] = got;
    }
  }
  const uint32_t got0 = __shfl_xor_sync(0xFFFFFFFFu, high ? e[0] : e[2], 2);
  const uint32_t got1 = __shfl_xor_sync(0xFFFFFFFFu, high ? e[1] : e[3], 2);
  if (high) {
    e[0] = got0, e[1] = got1;
  } else {
    e[2] = got0, e[3] = got1;
  }
}

// y's codes of two neighbouring columns: two bytes, column 2q's first.
__device__ __forceinline__ uint32_t e4m3x2(float v0, float v1) {
  return __nv_cvt_float2_to_fp8x2(make_float2(v0, v1), __NV_SATFINITE, __NV_E4M3);
}

// Lane q of a quad holds one row's code pairs (columns 2q, 2q + 1) of four 8-column chunks, chunks 0 | 1
// in lo and 2 | 3 in hi (M[q][c]: lane q's pair of chunk c). Returns chunk q's 8 bytes, the pairs
// M[0..3][q] in order, by two exchanges of 16-bit pairs, one shuffle each. After the first (lanes q and
// q ^ 2), lane q = 2h + l holds v = M[l][2h | 2h + 1] and w = M[2 + l][2h | 2h + 1]; in the second
// (lanes q and q ^ 1) each sends the halves that belong to its partner's chunk.
__device__ __forceinline__ uint2 quad_gather_codes(uint32_t lo, uint32_t hi, int q) {
  const bool h = q & 2, l = q & 1;
  const uint32_t got = __shfl_xor_sync(0xFFFFFFFFu, h ? lo : hi, 2);
  const uint32_t v = h ? got : lo, w = h ? hi : got;
  const uint32_t t = __shfl_xor_sync(0xFFFFFFFFu, __byte_perm(v, w, l ? 0x5410 : 0x7632), 1);
  return make_uint2(__byte_perm(v, t, l ? 0x3254 : 0x5410), __byte_perm(w, t, l ? 0x3276 : 0x7610));
}

// The epilogue's factors: what multiplies the accumulator (the operands' per-tensor scales) and the
// bias, and GELU's constants for an E4M3 y.
//
// GELU: CUDA's accurate tanhf costs about 20 instructions an element, more than the tensor cores'
// time for it at this k, so for an E4M3 y the tanh form of ops/activation.h runs on the
// special-function unit's tanh (one instruction, relative error below 2^-10.9, far below E4M3's 2^-4;
// where x < -2.6 and 1 + tanh(u) cancels, y may differ by one code at moderate y scales), and from
// h = c x alone, c = y_scale / 2: y_scale GELU(x) = h (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715
// x^3) = h (b + a h^2), so that one multiply-add of the scaled accumulator and bias makes h and x is
// never formed. a and b take c with |c| raised to 2^-40 at least (y_scale 0 must not make them
// infinite; below, y's codes are 0 unless |x| is so large that tanh(u) is +-1 either way). u is
// float32-exact for |c| up to 2^40; beyond, a would turn subnormal and u lose its cubic term (a stays
// at 2^-126 at least, so that an infinite h^2 meets no a of 0): past about 2^49, x in [-10, -7] may
// give saturated codes where GELU's are 0 (such y scales mean an amax below 1e-12).
// For bf16 and f32 y, which keep more bits, the sigmoid form x sigmoid(2u) = x / (1 + 2^(-2 log2(e) u))
// on the units' exp2 and reciprocal (each within 2 ulp; flushing to zero only meets 1 + 2^z >= 1),
// accurate to float32 ulps where the tanh form cancels.
struct Scales {
  float tensor;  // the operands' per-tensor scales, times out
  float out;  // an E4M3 y's y_scale, halved with GELU (h's factor); else 1
  float gelu_a, gelu_b;  // an E4M3 y with GELU: u = h (gelu_b + gelu_a h^2)
};
template <Out O, bool Gelu>
__device__ __forceinline__ Scales load_scales(const Params& p) {
  Scales s{1.0f, 1.0f, 0.0f, 0.0f};
  if (O == Out::E4M3 && p.y_scale != nullptr) s.out = Gelu ? 0.5f * *p.y_scale : *p.y_scale;
  if (!p.vector_scales) {
    if (p.a_scale_inv != nullptr) s.tensor = *p.a_scale_inv;
    if (p.a_scale != nullptr) s.tensor = 1.0f / *p.a_scale;  // ops::quantize's scale_inv, bit for bit
    if (p.b_scale_inv != nullptr) s.tensor *= *p.b_scale_inv;
  }
  s.tensor *= s.out;
  if (O == Out::E4M3 && Gelu) {
    using namespace ops::gelu_detail;
    const float c = copysignf(fmaxf(fabsf(s.out), 0x1p-40f), s.out);
    s.gelu_b = kSqrt2OverPi / c;
    s.gelu_a = copysignf(fmaxf(fabsf(kSqrt2OverPi * kCubic / c / (c * c)), 0x1p-126f), c);
  }
  return s;
}

// GELU of the epilogue's value v (for an E4M3 y, h; see Scales).
template <Out O>
__device__ __forceinline__ float gelu(float v, const Scales& s) {
  if constexpr (O == Out::E4M3) {
    const float u = fmaf(v * v, s.gelu_a, s.gelu_b) * v;
    float t;
    asm("tanh.approx.f32 %0, %1;" : "=f"(t) : "f"(u));
    return fmaf(v, t, v);
  } else {
    using namespace ops::gelu_detail;
    constexpr float kScale = -2.0f * 1.4426950408889634f * kSqrt2OverPi;  // -2 log2(e) sqrt(2/pi)
    const float z = fmaf(v * v, kCubic * kScale, kScale) * v;  // -2 log2(e) u
    float e, r;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(z));
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
    return v * r;
  }
}

// The bias's bf16 pairs at the thread's columns of tile nb (zeros without a bias or past n).
__device__ __forceinline__ void load_bias(const Params& p, int nb, int lane, uint32_t (&bias)[16]) {
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    const int col = nb * kBlockN + 8 * j + 2 * (lane % 4);
    bias[j] = p.bias != nullptr && col < p.n ? *reinterpret_cast<const uint32_t*>(p.bias + col) : 0u;
  }
}

// The bias as floats times the epilogue's factor (Scales::out), made before the wait for the tile's
// last products, where the math warps idle (the compiler keeps much of it there), rather than in the
// epilogue, the warpgroups' critical path.
__device__ __forceinline__ void scale_bias(const uint32_t (&bias)[16], const Scales& scales, float2 (&scaled)[16]) {
#pragma unroll
  for (int j = 0; j < 16; ++j) {
    scaled[j] = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&bias[j]));
    scaled[j].x *= scales.out, scaled[j].y *= scales.out;
  }
}

// y's tile (row block mb, column tile nb) from the warpgroup's accumulator: (sa sb) acc + bias in one
// fused multiply-add (for an E4M3 y times y_scale, and halved with GELU: see Scales), GELU, then E4M3
// codes (round to nearest even, saturating; NaN as 0x7F, without its sign) or bf16 (round to nearest
// even) through the hardware's paired conversions, or f32. The thread's rows are rows[h * 2 + i] =
// 64 h + 16 warp + lane / 4 + 8 i of the tile, its columns 8 j + 2 (lane % 4) + {0, 1} for j = 0..15:
// acc[64 h + 4 j + 2 i + {0, 1}]. Stores go out in 8- (E4M3) or 16-byte (bf16) row chunks, each lane of
// a quad one chunk of every four after an exchange within the quad. Per-row scales (Vec) are a
// parameter so that no branch splits the tile's code into pieces the compiler schedules one by one.
template <Out O, bool Gelu, bool Vec>
__device__ __forceinline__ void store_tile(const float (&acc)[128], const Params& p, const Scales& scales,
                                           const float2 (&bias)[16], int mb, int nb, int warp, int lane) {
  const int q = lane % 4;
  int rows[4];
  float row_scale[4];
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    rows[r] = mb * kBlockM + (r / 2) * 64 + warp * 16 + lane / 4 + 8 * (r % 2);
    row_scale[r] = Vec ? (rows[r] < p.m ? p.a_scale_inv[rows[r]] * scales.out : 0.0f) : scales.tensor;
  }
  // Four 8-column chunks (one per lane of the quad after the exchange) of two rows at a time: few enough
  // values in flight that the accumulator, the bias and the loops' state keep to registers.
#pragma unroll
  for (int pass = 0; pass < 8; ++pass) {
    const int group = pass / 2, r0 = pass % 2 * 2;
    uint32_t words[2][4];  // [row][chunk]: the row's two columns of the chunk, packed (E4M3: two bytes)
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int j = 4 * group + c, col = nb * kBlockN + 8 * j + 2 * q;
      const float2 b = bias[j];
      float2 col_scale = make_float2(1.0f, 1.0f);
      if (Vec && col < p.n) col_scale = *reinterpret_cast<const float2*>(p.b_scale_inv + col);
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = r0 + i;
        const float* a = acc + 64 * (r / 2) + 4 * j + 2 * (r % 2);
        float v0 = fmaf(Vec ? row_scale[r] * col_scale.x : row_scale[r], a[0], b.x);
        float v1 = fmaf(Vec ? row_scale[r] * col_scale.y : row_scale[r], a[1], b.y);
        if constexpr (Gelu) v0 = gelu<O>(v0, scales), v1 = gelu<O>(v1, scales);
        if constexpr (O == Out::E4M3) {
          words[i][c] = e4m3x2(v0, v1);
        } else if constexpr (O == Out::Bf16) {
          const __nv_bfloat162 pair = __float22bfloat162_rn(make_float2(v0, v1));
          words[i][c] = *reinterpret_cast<const uint32_t*>(&pair);
        } else {
          if (rows[r] < p.m && col < p.n)
            *reinterpret_cast<float2*>(static_cast<float*>(p.y) + static_cast<size_t>(rows[r]) * p.n + col) =
                make_float2(v0, v1);
        }
      }
    }
    if constexpr (O != Out::F32) {
      const int col = nb * kBlockN + 8 * (4 * group + q);  // after the exchange: one chunk per lane
#pragma unroll
      for (int i = 0; i < 2; ++i) {
        const int r = r0 + i;
        if constexpr (O == Out::E4M3) {
          const uint2 chunk = quad_gather_codes(words[i][0] | words[i][1] << 16, words[i][2] | words[i][3] << 16, q);
          if (rows[r] < p.m && col < p.n)
            *reinterpret_cast<uint2*>(static_cast<uint8_t*>(p.y) + static_cast<size_t>(rows[r]) * p.n + col) = chunk;
        } else {
          quad_transpose(words[i], q);
          if (rows[r] < p.m && col < p.n)
            *reinterpret_cast<uint4*>(static_cast<__nv_bfloat16*>(p.y) + static_cast<size_t>(rows[r]) * p.n + col) =
                make_uint4(words[i][0], words[i][1], words[i][2], words[i][3]);
        }
      }
    }
  }
}

// The math warps' barrier (id 3; the turns use 1 and 2), without the producer.
__device__ __forceinline__ void math_sync() { asm volatile("bar.sync 3, %0;" ::"n"(kMathThreads) : "memory"); }

// With a bf16 a, the math warps quantize the unit's rows themselves before its first products: each
// 16-code chunk (encode_row: ops::quantize's codes, bit for bit) goes where a TMA load with 128-byte
// swizzling would have put it (chunk c of row r at chunk c ^ (r % 8) of the row). Eight chunks' loads
// are in flight per thread at a time, so that the reads run at memory speed rather than its latency.
__device__ __forceinline__ void quantize_rows(const Params& p, int mb, uint8_t* a_tiles) {
  constexpr int kBatch = 8;
  const float scale = *p.a_scale;
  const int items = p.k_blocks * kBlockM * 8;  // (k-slice, row, chunk), 8 threads a row: 256 bytes read
  for (int first = threadIdx.x; first < items; first += kBatch * kMathThreads) {
    uint4 bits[kBatch][2];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int item = first + i * kMathThreads, kb = item / (kBlockM * 8), r = item / 8 % kBlockM, c = item % 8;
      const int row = mb * kBlockM + r, k0 = kb * kBlockK + 16 * c;
      bits[i][0] = bits[i][1] = make_uint4(0, 0, 0, 0);
      if (item < items && row < p.m && k0 < p.k) {
        const uint4* src = reinterpret_cast<const uint4*>(p.a_bf16 + static_cast<size_t>(row) * p.k + k0);
        bits[i][0] = src[0], bits[i][1] = src[1];
      }
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int item = first + i * kMathThreads, kb = item / (kBlockM * 8), r = item / 8 % kBlockM, c = item % 8;
      if (item >= items) break;
      uint32_t codes[4];
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        const uint4& b = bits[i][q / 2];
        const uint32_t lo = q % 2 == 0 ? b.x : b.z, hi = q % 2 == 0 ? b.y : b.w;
        const float v[4] = {__uint_as_float(lo << 16), __uint_as_float(lo & 0xFFFF0000u), __uint_as_float(hi << 16),
                            __uint_as_float(hi & 0xFFFF0000u)};
        codes[q] = encode_row<Fp8Format::E4M3, false>(v, scale);
      }
      *reinterpret_cast<uint4*>(a_tiles + kb * kTileBytes + r * kBlockK + ((c ^ (r % 8)) << 4)) =
          make_uint4(codes[0], codes[1], codes[2], codes[3]);
    }
  }
  // The codes were written by ordinary stores and wgmma reads them through the async proxy.
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

template <Out O, bool Gelu>
__global__ void __launch_bounds__(kThreads, 1)
    resident_gemm_kernel(const __grid_constant__ CUtensorMap a_map, const __grid_constant__ CUtensorMap b_map, const Params p) {
#ifdef FP8KIT_SM90
  extern __shared__ uint8_t raw[];
  uint8_t* const base = raw + ((1024 - (shared_address(raw) & 1023)) & 1023);
  uint8_t* const a_tiles = base;
  uint8_t* const b_stages = base + p.k_blocks * kTileBytes;
  uint64_t* const full = reinterpret_cast<uint64_t*>(b_stages + p.stages * kTileBytes);
  uint64_t* const empty = full + p.stages;
  uint64_t* const a_ready = empty + p.stages;  // [k_blocks]
  uint64_t* const a_empty = a_ready + p.k_blocks;
  const int cluster = blockIdx.x / kCluster, clusters = gridDim.x / kCluster;
  const uint32_t rank = cluster_rank();

  if (threadIdx.x == kMathThreads) {
    for (int s = 0; s < p.stages; ++s) {
      barrier_init(&full[s], 1);
      barrier_init(&empty[s], kCluster * 4);  // one arrival per warp of the consuming warpgroup, both blocks
    }
    for (int kb = 0; kb < p.k_blocks; ++kb) barrier_init(&a_ready[kb], 1);
    // Every math warp, when the unit's tiles are done; a warpgroup without a tile in the unit arrives at
    // once. One count for both warpgroups is enough because every unit of a block has the same number
    // of tiles when a block takes several (the column tiles are split only when there are fewer
    // row-block pairs than clusters): a warpgroup's early arrival for unit u comes after its arrival
    // for unit u - 1, which its own last products preceded.
    barrier_init(a_empty, kMathThreads / 32);
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  cluster_sync();  // the partner's barriers are ready before anything arrives on them

  if (threadIdx.x >= kMathThreads) {  // the producer warpgroup: one thread issues every copy
    asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x != kMathThreads) return;
    Ring ring{p.stages};
    int unit = 0;
    for (int u = cluster; u < p.units; u += clusters, ++unit) {
      int pair, first;
      unit_of(p, u, pair, first);
      const int mb = pair * kCluster + static_cast<int>(rank);
      if (p.a_bf16 == nullptr) {  // a's codes by TMA (a bf16 a: the math warps'), each 128 of k on its own
        if (unit > 0) barrier_wait(a_empty, (unit - 1) & 1);  // the last unit's products are done with a
        for (int kb = 0; kb < p.k_blocks; ++kb) {
          barrier_expect_bytes(&a_ready[kb], kTileBytes);
          tma_load(a_tiles + kb * kTileBytes, &a_map, &a_ready[kb], kb * kBlockK, mb * kBlockM);
        }
      }
      for (int nb = first; nb < unit_end(p, first); ++nb) {
        for (int kb = 0; kb < p.k_blocks; ++kb, ring.advance()) {
          barrier_wait(&empty[ring.stage], ring.phase ^ 1);  // both blocks' math warps are done with the stage
          barrier_expect_bytes(&full[ring.stage], kTileBytes);
          tma_load_multicast(b_stages + ring.stage * kTileBytes + rank * (kTileBytes / kCluster), &b_map, &full[ring.stage],
                             kb * kBlockK, nb * kBlockN + static_cast<int>(rank) * (kBlockN / kCluster), (1u << kCluster) - 1);
        }
      }
    }
    // The partner arrives on this block's barriers until its last stage: this block's shared memory
    // must outlive those arrivals.
    for (int i = 0; i < p.stages; ++i, ring.advance()) barrier_wait(&empty[ring.stage], ring.phase ^ 1);
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
  const int group = threadIdx.x / 128, warp = threadIdx.x / 32 % 4, lane = threadIdx.x % 32;
  int tiles = 0;  // the block's column tiles over all its units, for the turns' last hand-over
  for (int u = cluster; u < p.units; u += clusters) {
    int pair, first;
    unit_of(p, u, pair, first);
    tiles += unit_end(p, first) - first;
  }
  const Scales scales = load_scales<O, Gelu>(p);
  const uint32_t a_low = descriptor_low(a_tiles), b_low = descriptor_low(b_stages);
  const auto release = [&](int stage) {  // the stage's slice is read: lane i tells the cluster's block i
    if (lane < kCluster) barrier_arrive_in(&empty[stage], lane);
  };
  float acc[128];
  Ring ring{p.stages};
  int t = 0, unit = 0;
  for (int u = cluster; u < p.units; u += clusters, ++unit) {
    int pair, first;
    unit_of(p, u, pair, first);
    const int mb = pair * kCluster + static_cast<int>(rank);
    if (p.a_bf16 != nullptr) {
      math_sync();  // both warpgroups' products of the last unit are done with a
      quantize_rows(p, mb, a_tiles);
      math_sync();
    }
    for (int nb = first; nb < unit_end(p, first); ++nb, ++t) {
      if (t % 2 != group) {  // the other warpgroup's tile
        for (int kb = 0; kb < p.k_blocks; ++kb) ring.advance();
        continue;
      }
      // The tile's bias, read before the products so that the epilogue does not wait for it.
      uint32_t bias[16];
      load_bias(p, nb, lane, bias);
      float2 scaled_bias[16];
      if (t > 0) wait_turn(group);
      int last = 0;
      for (int kb = 0; kb < p.k_blocks; ++kb, ring.advance()) {
        if (p.a_bf16 == nullptr) barrier_wait(&a_ready[kb], unit & 1);
        barrier_wait(&full[ring.stage], ring.phase);
#pragma unroll
        for (int i = 0; i < 128; ++i) fence_operand(acc[i]);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        const uint32_t b_at = b_low + ring.stage * (kTileBytes >> 4);
#pragma unroll
        for (int ks = 0; ks < kBlockK / 32; ++ks) {  // 32 bytes of k per step: 2 in the descriptor's units
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const uint32_t a_at = a_low + ((kb * kTileBytes + h * 64 * kBlockK) >> 4) + 2 * ks;
            wgmma<Formats::E4M3xE4M3>((static_cast<uint64_t>(kDescriptorHigh) << 32) | a_at,
                                      (static_cast<uint64_t>(kDescriptorHigh) << 32) | (b_at + 2 * ks), acc + 64 * h,
                                      kb > 0 || ks > 0);
          }
        }
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#pragma unroll
        for (int i = 0; i < 128; ++i) fence_operand(acc[i]);
        if (kb > 0) {
          asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
          release(last);
        }
        last = ring.stage;
      }
      if (t + 1 < tiles) hand_turn(1 - group);  // the products are queued: the other warpgroup's turn
      scale_bias(bias, scales, scaled_bias);  // while the last slice's products run
      asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
#pragma unroll
      for (int i = 0; i < 128; ++i) fence_operand(acc[i]);
      release(last);
      if (p.vector_scales) {
        store_tile<O, Gelu, true>(acc, p, scales, scaled_bias, mb, nb, warp, lane);
      } else {
        store_tile<O, Gelu, false>(acc, p, scales, scaled_bias, mb, nb, warp, lane);
      }
    }
    if (lane == 0) barrier_arrive_in(a_empty, rank);  // this warp is done with the unit's a
  }
#endif
}

template <Out O, bool Gelu>
void launch(const GemmArgs& g, cudaStream_t stream) {
  const DeviceFacts& device = device_facts();
  const Layout l = layout(g.k, device.shared_optin);
  static std::once_flag configured;
  std::call_once(configured, [&] {
    FP8KIT_CUDA_CHECK(cudaFuncSetAttribute(resident_gemm_kernel<O, Gelu>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                           static_cast<int>(device.shared_optin)));
  });
  const CUtensorMap b = tensor_map(g.b, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, g.n, g.k, kBlockN / kCluster, kBlockK,
                                   CU_TENSOR_MAP_SWIZZLE_128B);
  // A bf16 a is read by the kernel's own loads (b's map stands in, unused).
  const CUtensorMap a = g.a_type == DType::Bf16 ? b
                                                : tensor_map(g.a, CU_TENSOR_MAP_DATA_TYPE_UINT8, 1, g.m, g.k, kBlockM,
                                                             kBlockK, CU_TENSOR_MAP_SWIZZLE_128B);
  ClusterLaunch launcher(kCluster, kThreads, l.bytes, stream);
  // One block per SM whatever k is, so the first call's count holds for all.
  static const int resident = launcher.resident_clusters(resident_gemm_kernel<O, Gelu>, l.bytes);
  Params p{};
  if (g.a_type == DType::Bf16) p.a_bf16 = static_cast<const __nv_bfloat16*>(g.a), p.a_scale = g.a_scale;
  p.vector_scales = g.a_scale_mode == ScaleMode::OuterVec;
  p.a_scale_inv = g.a_scale_inv, p.b_scale_inv = g.b_scale_inv;
  p.bias = has_bias(g.epilogue) ? static_cast<const __nv_bfloat16*>(g.bias) : nullptr;
  p.y_scale = g.y_scale;
  p.y = g.y;
  p.m = static_cast<int>(g.m), p.n = static_cast<int>(g.n), p.k = static_cast<int>(g.k);
  p.k_blocks = l.k_blocks, p.stages = l.stages;
  // Column tiles are split into chunks when there are fewer row-block pairs than clusters, so that every
  // cluster has work (each chunk loads its rows of a once more).
  const int row_pairs = static_cast<int>((g.m + kBlockM * kCluster - 1) / (kBlockM * kCluster));
  p.n_tiles = static_cast<int>((g.n + kBlockN - 1) / kBlockN);
  const int chunks = std::clamp(resident / row_pairs, 1, p.n_tiles);
  p.chunk_tiles = (p.n_tiles + chunks - 1) / chunks;
  p.n_chunks = (p.n_tiles + p.chunk_tiles - 1) / p.chunk_tiles;
  p.units = row_pairs * p.n_chunks;
  launcher.config.gridDim = dim3(static_cast<unsigned>(std::min(p.units, resident) * kCluster));
  FP8KIT_CUDA_CHECK(cudaLaunchKernelEx(&launcher.config, resident_gemm_kernel<O, Gelu>, a, b, p));
}

}  // namespace

bool resident_gemm_runs(const GemmArgs& g) {
  const DeviceFacts& device = device_facts();
  const bool scales = (g.a_scale_mode == ScaleMode::Scalar && g.b_scale_mode == ScaleMode::Scalar) ||
                      (g.a_scale_mode == ScaleMode::OuterVec && g.b_scale_mode == ScaleMode::OuterVec);
  const bool y = g.y_type == DType::E4M3 || g.y_type == DType::Bf16 || g.y_type == DType::F32;
  const bool a = g.a_type == DType::E4M3 || (g.a_type == DType::Bf16 && g.a_scale != nullptr &&
                                              g.a_scale_mode == ScaleMode::Scalar && g.b_scale_mode == ScaleMode::Scalar);
  const bool pointers = (g.a_scale_mode != ScaleMode::OuterVec || (g.a_scale_inv != nullptr && g.b_scale_inv != nullptr)) &&
                        (g.y_type != DType::E4M3 || g.y_scale != nullptr);
  const bool shape = g.m > 0 && g.n > 0 && g.n % 8 == 0 && g.k > 0 && g.k % 16 == 0 &&
                     g.m <= (int64_t{1} << 31) - kBlockM * kCluster && g.n < (int64_t{1} << 31);
  const bool alignment = aligned(g.a, 16) && aligned(g.b, 16) && aligned(g.y, 16) && aligned(g.bias, 4);
  return device.hopper && a && g.b_type == DType::E4M3 && g.fast_accumulation && !g.accumulate && scales && y &&
         pointers && shape && alignment && layout(g.k, device.shared_optin).stages >= kMinStages;
}

void resident_gemm(const GemmArgs& g, cudaStream_t stream) {
  if (!resident_gemm_runs(g))
    throw Error("resident GEMM: a " + std::to_string(g.m) + "x" + std::to_string(g.n) + "x" + std::to_string(g.k) +
                " product this kernel does not run (resident_gemm_runs)");
  const bool gelu = has_gelu(g.epilogue);
  switch (g.y_type) {
    case DType::E4M3: return gelu ? launch<Out::E4M3, true>(g, stream) : launch<Out::E4M3, false>(g, stream);
    case DType::Bf16: return gelu ? launch<Out::Bf16, true>(g, stream) : launch<Out::Bf16, false>(g, stream);
    default: return gelu ? launch<Out::F32, true>(g, stream) : launch<Out::F32, false>(g, stream);
  }
}

}  // namespace fp8kit::cuda
