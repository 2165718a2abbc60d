// FP8 quantization kernel: cast + transpose + amax in one pass over x [rows, cols], in one of two tiles,
// or, for a large tensor cast as it lies (no transposed copy, no epilogue), as one flat array
// (quantize_flat_tile).
//
// Large tensors (2^20 elements and more; bandwidth-bound): a block of 256 threads casts a
// (64 * passes) x 64 tile (rows x cols). Each warp covers 16 rows x 32 columns as 4 x 8 lanes, each
// lane a 4 x 4 micro-tile, loaded as 4 row vectors (16 bytes of fp32, 8 of bf16) so that 8 lanes read
// one contiguous stretch of a row; each thread does `passes` such micro-tiles, 64 rows apart, all
// loads issued (as raw registers) before the first use: 2 passes for fp32 and 4 for bf16, so a block
// has 32 KB of loads in flight either way. fp32 tensors below 2^23 elements take 1 pass (16 KB, twice
// the blocks: at these sizes a grid of 2-pass blocks leaves the GPU part-empty), and so do fp32 casts
// that apply an epilogue or a gradient at any size (GELU's, per element: at 16384 x 16384, the GPT
// layer's GELU casts took 1652 and 1799 us with 2 passes, 1438 and 1516 with 1). The straight output
// is stored 4 bytes per row. For the transposed output the 4x4 codes are transposed in registers (byte
// permutes) into 4 words, each 4 rows of one column, kept in shared memory [64 cols][16 * passes + 1
// words]; the odd row stride makes the writes (lanes differ in column by 4 and in row-word by 1)
// conflict-free, and the reads (16 bytes per lane) nearly so.
//
// Small tensors (latency-bound, like every activation of the seed model): a block of 256 threads
// casts a 32 x 32 tile, each thread 4 consecutive rows of one column (a warp reads 4 rows of 32
// columns, 128 contiguous bytes each of fp32). A [6400, 32] tensor gets 200 blocks of 4 elements per
// thread instead of the large tile's 50 of 16 (half of whose threads would idle at 32 columns): a
// small tensor's time is its longest thread's. The thread's 4 codes are one word of the transposed
// output (4 rows of one column), staged in shared memory [32 cols][9 words] and stored 4 bytes per
// lane, 8 lanes per transposed row.
//
// amax: per-thread max of |x| bits, warp max, one atomicMax per block. An optional Linear epilogue
// (bias + activation), or the backward of one (activation, dropout), is applied to the fp32 values as they
// are loaded (elements outside the matrix stay 0). quantize_fp8_batch runs the same tile code for
// several tensors in one launch (a 1-D grid split among them), so its outputs are those of one launch
// per tensor.
#include "ops/cuda/quantize.h"

#include <algorithm>
#include <string>
#include <type_traits>

#include "base/error.h"
#include "ops/cuda/aligned.h"
#include "ops/cuda/batch.cuh"
#include "ops/cuda/bias_sum.cuh"
#include "ops/cuda/fp8_cast.cuh"
#include "runtime/cuda/check.h"
#include "runtime/cuda/dependent_launch.cuh"

namespace fp8kit::cuda {
namespace {

constexpr int kTileCols = 64;
constexpr int kThreads = 256;
// Micro-tile rows per thread (tile rows per block: 64 x passes) of large tensors, by input element.
template <typename T>
constexpr int kPasses = sizeof(T) == 4 ? 2 : 4;
constexpr int64_t kSmallTensor = int64_t{1} << 20;  // elements; below, the small tile
// f32 tensors below this many elements (a small model's weights) take one pass per thread: twice the
// large tile's blocks, so that the grid fills the GPU (two 768 x 3072 weights: 1,152 blocks, not 576).
constexpr int64_t kMediumTensor = int64_t{1} << 23;
constexpr int64_t kMaxGridY = 65535;  // a launch's blocks along y: the tiled kernels' row tiles
constexpr int kSmall = 0;     // the kernels' Passes for the small tile
constexpr int kSwiGlu = -1;   // and for the SwiGLU tile: the large tile's columns, one pass (f32 x only)
constexpr int kSmallTile = 32;  // rows and columns of a small tile
constexpr int kFlat = -2;       // and for the flat kernel (quantize_flat_tile)
constexpr int kFlatLoads = 4;   // the flat kernel's 16-byte loads in flight per thread
constexpr int kSums = -3;       // and for the large tile with one pass that also sums a bias gradient
static_assert(kBiasSumTileRows == 64 && kBiasSumTileCols == kTileCols, "a bias sum's tile is the one-pass tile");

struct Params {
  const void* x;
  int64_t rows, cols;
  const float* scale;
  uint8_t* q;
  uint8_t* q_t;
  float* amax;
  float* scale_inv;
  bool vector_load;     // every row of x starts 16-byte (fp32) / 8-byte (bf16) aligned (SwiGLU's operands 16)
  bool vector_store;    // every row of q starts 4-byte aligned
  bool vector_store_t;  // every row of q_t starts 16-byte aligned
  LinearEpilogue epilogue;
  bool vector_store_y;    // every row of epilogue.y starts 16-byte aligned
  bool vector_store_pre;  // and of epilogue.pre
  bool gradient_active;
  EpilogueGradientArgs gradient;
  BiasSumArgs sum;  // kSums launches only
};

// Four consecutive elements of a row as loaded: a float4 of fp32, or a uint2 holding four bf16.
template <typename T>
using Raw = std::conditional_t<sizeof(T) == 4, float4, uint2>;

// raw = x[row, col .. col + 3]; zeros (+0.0) outside the matrix: they neither raise amax nor get stored.
template <typename T>
__device__ __forceinline__ Raw<T> load_row(const Params& p, int64_t row, int64_t col) {
  const T* x = static_cast<const T*>(p.x);
  Raw<T> raw{};
  if (row >= p.rows) return raw;
  const T* src = x + row * p.cols + col;
  if (p.vector_load && col + 3 < p.cols) return __ldcs(reinterpret_cast<const Raw<T>*>(src));  // streamed: read once
  T e[4] = {};
#pragma unroll
  for (int i = 0; i < 4; ++i)
    if (col + i < p.cols) e[i] = src[i];
  if constexpr (sizeof(T) == 4) {
    raw = make_float4(e[0], e[1], e[2], e[3]);
  } else {
    raw = make_uint2(e[0] | (static_cast<uint32_t>(e[1]) << 16), e[2] | (static_cast<uint32_t>(e[3]) << 16));
  }
  return raw;
}

__device__ __forceinline__ void to_floats(const float4& raw, float v[4]) { v[0] = raw.x, v[1] = raw.y, v[2] = raw.z, v[3] = raw.w; }
__device__ __forceinline__ void to_floats(const uint2& raw, float v[4]) {
  v[0] = bf16_to_float(raw.x & 0xFFFFu), v[1] = bf16_to_float(raw.x >> 16);
  v[2] = bf16_to_float(raw.y & 0xFFFFu), v[3] = bf16_to_float(raw.y >> 16);
}

// x's value v at (row, col), inside the matrix, after the Linear epilogue or its gradient (when set);
// GELU's input into *pre when pre is set (the caller stores it at epilogue.pre). With MaySeeSwiGlu,
// SwiGLU's operands are read here one by one (the small tile); without, the tile never sees them
// (launch() and launch_batch() give SwiGLU's casts the SwiGLU tile; grid_of checks it) and its path
// has no SwiGLU branch (linear_epilogue<false>: at 16384 rows the lab MLP's GELU casts took 450 and
// 595 us with them, 314 and 345 without; its FP8 training step 1.97 against 1.60 ms).
template <bool MaySeeSwiGlu = true>
__device__ __forceinline__ float transformed(const Params& p, int64_t row, int64_t col, float v,
                                            const DeviceDropoutMask& mask, float* pre) {
  const int64_t i = row * p.cols + col;
  const LinearEpilogue& e = p.epilogue;
  if (e.active<MaySeeSwiGlu>())
    v = linear_epilogue<MaySeeSwiGlu>(e, v, MaySeeSwiGlu && e.up != nullptr ? e.up[i] : 0.0f, col, pre);
  if (p.gradient_active) v = MaySeeSwiGlu ? p.gradient(v, i, col, mask) : p.gradient.activation_gradient(v, i, col, mask);
  return v;
}

// Whether p's values take SwiGLU's operands beside x (swiglu_operands). Large tensors of those take
// the SwiGLU tile.
__host__ __device__ inline bool has_swiglu_operands(const Params& p) {
  return swiglu_operands(p.epilogue, p.gradient).first != nullptr;
}

// 4 elements of an f32 operand of x's shape, row `row` from column col, as load_row reads x's; zeros
// for a null operand and outside the matrix.
__device__ __forceinline__ float4 load_operand(const Params& p, const float* base, int64_t row, int64_t col) {
  float4 v{};
  if (base == nullptr || row >= p.rows) return v;
  const float* src = base + row * p.cols + col;
  if (p.vector_load && col + 3 < p.cols) return __ldcs(reinterpret_cast<const float4*>(src));
  float e[4] = {};
#pragma unroll
  for (int i = 0; i < 4; ++i)
    if (col + i < p.cols) e[i] = src[i];
  return make_float4(e[0], e[1], e[2], e[3]);
}

// Stores 4 values of row `row` from column col (inside the matrix) at dst's element row * cols + col:
// one 16-byte store where `vector` says the rows are aligned and all 4 lie inside.
__device__ __forceinline__ void store_row4(float* dst, int64_t row, int64_t col, int64_t cols, bool vector,
                                           const float v[4]) {
  float* at = dst + row * cols + col;
  if (vector && col + 3 < cols) {
    *reinterpret_cast<float4*>(at) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
#pragma unroll
    for (int i = 0; i < 4; ++i)
      if (col + i < cols) at[i] = v[i];
  }
}

// The block's amax (per-thread maxima `amax`) into p.amax with one atomicMax, and scale_inv from the
// first block. Ends with the block synchronized (shared memory written before it may be read).
template <bool Divide>
__device__ __forceinline__ void block_amax(const Params& p, uint32_t amax, float scale, bool first_block) {
  __shared__ uint32_t warp_amax[kThreads / 32];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  amax = __reduce_max_sync(0xFFFFFFFFu, amax);
  if (lane == 0) warp_amax[warp] = amax;
  __syncthreads();
  if (threadIdx.x == 0) {
    if (p.amax != nullptr) {
      for (int i = 1; i < kThreads / 32; ++i) amax = max(amax, warp_amax[i]);
      if (amax > 0) atomicMax(reinterpret_cast<unsigned int*>(p.amax), amax);
    }
    if (p.scale_inv != nullptr && first_block) *p.scale_inv = Divide ? scale : 1.0f / scale;
  }
}

// Casts tile (bx, by) of p: the whole of one block's work, shared by the single and batched kernels.
// SwiGlu: SwiGLU's operands (swiglu_operands) are loaded 4 at a time with x, up front (one pass leaves
// the registers for them), rather than one by one as the values are made. sums (one pass): the tile's
// values (after the epilogue or gradient) are also put there, for quantize_piece's bias sums.
template <typename T, Fp8Format F, bool Divide, int passes, bool SwiGlu = false>
__device__ __forceinline__ void quantize_tile(const Params& p, int64_t bx, int64_t by, BiasSumTile* sums = nullptr) {
  constexpr int stride = 16 * passes + 1;  // words per transposed row (+1 against bank conflicts)
  __shared__ uint32_t tile_t[kTileCols * stride];

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int col_local = (warp & 1) * 32 + (lane & 7) * 4;
  const int row_local = (warp >> 1) * 16 + (lane >> 3) * 4;  // + 64 * pass
  const int64_t row0 = by * 64 * passes;
  const int64_t col0 = bx * kTileCols;
  const int64_t col = col0 + col_local;
  const float scale = *p.scale;
  // The epilogue gradient's dropout mask (fp32 input only, used only with p.gradient_active).
  const DeviceDropoutMask mask = sizeof(T) == 4 ? p.gradient.dropout.mask() : DeviceDropoutMask(0, 0, 0, 0);

  Raw<T> raw[passes][4];
  float4 first[passes][4], second[passes][4];  // SwiGlu: swiglu_operands' first and second
  const SwiGluOperands operands = swiglu_operands(p.epilogue, p.gradient);
#pragma unroll
  for (int pass = 0; pass < passes; ++pass)
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t row = row0 + row_local + 64 * pass + r;
      raw[pass][r] = load_row<T>(p, row, col);
      if constexpr (SwiGlu) {
        first[pass][r] = load_operand(p, operands.first, row, col);
        second[pass][r] = load_operand(p, operands.second, row, col);
      }
    }

  uint32_t amax = 0;
#pragma unroll
  for (int pass = 0; pass < passes; ++pass) {
    uint32_t w[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int64_t row = row0 + row_local + 64 * pass + r;
      float v[4];
      to_floats(raw[pass][r], v);
      if constexpr (sizeof(T) == 4) {
        if (SwiGlu && operands.first != nullptr) {
          float a[4], b[4];
          to_floats(first[pass][r], a);
          to_floats(second[pass][r], b);
#pragma unroll
          for (int i = 0; i < 4; ++i)
            v[i] = p.epilogue.up != nullptr ? maybe_bf16(swiglu_value(v[i], a[i]), p.epilogue.bf16)
                                            : p.gradient.swiglu_gradient(v[i], a[i], b[i]);
        } else if ((p.epilogue.active() || p.gradient_active) && row < p.rows) {
          float pre[4];
#pragma unroll
          for (int i = 0; i < 4; ++i)
            if (col + i < p.cols) v[i] = transformed<false>(p, row, col + i, v[i], mask, pre + i);
          if (p.epilogue.y != nullptr) store_row4(p.epilogue.y, row, col, p.cols, p.vector_store_y, v);
          if (p.epilogue.pre != nullptr) store_row4(p.epilogue.pre, row, col, p.cols, p.vector_store_pre, pre);
        }
      }
      if (passes == 1 && sums != nullptr) put4(*sums, row_local + r, col_local, v);
#pragma unroll
      for (int i = 0; i < 4; ++i) amax = max(amax, amax_bits(__float_as_uint(v[i])));
      w[r] = encode_row<F, Divide>(v, scale);
      if (p.q != nullptr && row < p.rows) {
        uint8_t* dst = p.q + row * p.cols + col;
        if (p.vector_store && col + 3 < p.cols) {
          *reinterpret_cast<uint32_t*>(dst) = w[r];
        } else {
#pragma unroll
          for (int i = 0; i < 4; ++i)
            if (col + i < p.cols) dst[i] = static_cast<uint8_t>(w[r] >> (8 * i));
        }
      }
    }
    if (p.q_t != nullptr) {
      // Word i = column i of the micro-tile, rows 0..3 in bytes 0..3.
      uint32_t columns[4];
      transpose_4x4(w, columns);
      uint32_t* t = tile_t + col_local * stride + (row_local + 64 * pass) / 4;
#pragma unroll
      for (int i = 0; i < 4; ++i) t[i * stride] = columns[i];
    }
  }

  block_amax<Divide>(p, amax, scale, bx == 0 && by == 0);

  if (p.q_t != nullptr) {
    // 64 transposed rows of 64 * passes bytes: 4 * passes lanes per row, 16 bytes each.
    constexpr int chunks = 4 * passes;
#pragma unroll
    for (int round = 0; round < kTileCols * chunks / kThreads; ++round) {
      const int id = threadIdx.x + kThreads * round;
      const int c = id / chunks, chunk = id % chunks;
      const int64_t out_row = col0 + c;  // a column of x
      const int64_t out_col = row0 + 16 * chunk;
      if (out_row >= p.cols || out_col >= p.rows) continue;
      const uint32_t* t = tile_t + c * stride + 4 * chunk;
      const uint4 words = make_uint4(t[0], t[1], t[2], t[3]);
      uint8_t* dst = p.q_t + out_row * p.rows + out_col;
      if (p.vector_store_t && out_col + 15 < p.rows) {
        *reinterpret_cast<uint4*>(dst) = words;
      } else {
        const uint32_t w[4] = {words.x, words.y, words.z, words.w};
#pragma unroll
        for (int i = 0; i < 16; ++i)
          if (out_col + i < p.rows) dst[i] = static_cast<uint8_t>(w[i / 4] >> (8 * (i % 4)));
      }
    }
  }
}

// Casts small tile (bx, by) of p: 32 x 32, thread (lane, warp) rows 4 warp .. 4 warp + 3 of column lane.
// With `codes` set (quantize_fp8_gemm), the tile's codes also go there, row-major, `stride` bytes per
// row (zeros outside the matrix).
template <typename T, Fp8Format F, bool Divide>
__device__ __forceinline__ void quantize_small_tile(const Params& p, int64_t bx, int64_t by,
                                                    uint8_t* codes = nullptr, int stride_codes = 0) {
  constexpr int stride = kSmallTile / 4 + 1;  // words per transposed row (+1 against bank conflicts)
  __shared__ uint32_t tile_t[kSmallTile * stride];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t col = bx * kSmallTile + lane, row0 = by * kSmallTile + 4 * warp;
  const float scale = *p.scale;
  const DeviceDropoutMask mask = sizeof(T) == 4 ? p.gradient.dropout.mask() : DeviceDropoutMask(0, 0, 0, 0);
  const T* x = static_cast<const T*>(p.x);

  float v[4] = {};  // +0 outside the matrix: neither raises amax nor gets stored
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int64_t row = row0 + r;
    if (col >= p.cols || row >= p.rows) continue;
    if constexpr (sizeof(T) == 4) {
      v[r] = x[row * p.cols + col];
    } else {
      v[r] = bf16_to_float(x[row * p.cols + col]);
    }
  }
  uint32_t amax = 0;
#pragma unroll
  for (int r = 0; r < 4; ++r) {
    const int64_t row = row0 + r;
    if constexpr (sizeof(T) == 4) {
      if ((p.epilogue.active() || p.gradient_active) && col < p.cols && row < p.rows) {
        v[r] = transformed(p, row, col, v[r], mask, p.epilogue.pre != nullptr ? p.epilogue.pre + row * p.cols + col : nullptr);
        if (p.epilogue.y != nullptr) p.epilogue.y[row * p.cols + col] = v[r];
      }
    }
    amax = max(amax, amax_bits(__float_as_uint(v[r])));
  }
  const uint32_t w = encode_row<F, Divide>(v, scale);  // byte r: row row0 + r
  if (p.q != nullptr && col < p.cols) {
#pragma unroll
    for (int r = 0; r < 4; ++r)
      if (row0 + r < p.rows) p.q[(row0 + r) * p.cols + col] = static_cast<uint8_t>(w >> (8 * r));
  }
  if (p.q_t != nullptr) tile_t[lane * stride + warp] = w;
  if (codes != nullptr) {
#pragma unroll
    for (int r = 0; r < 4; ++r) codes[(4 * warp + r) * stride_codes + lane] = static_cast<uint8_t>(w >> (8 * r));
  }

  block_amax<Divide>(p, amax, scale, bx == 0 && by == 0);

  if (p.q_t != nullptr) {
    // 32 transposed rows of 8 words: thread t stores word t % 8 of row t / 8.
    const int c = threadIdx.x / 8, word = threadIdx.x % 8;
    const int64_t out_row = bx * kSmallTile + c;  // a column of x
    const int64_t out_col = by * kSmallTile + 4 * word;
    if (out_row < p.cols && out_col < p.rows) {
      const uint32_t t = tile_t[c * stride + word];
      uint8_t* dst = p.q_t + out_row * p.rows + out_col;
      if (p.rows % 4 == 0 && reinterpret_cast<uintptr_t>(p.q_t) % 4 == 0) {
        *reinterpret_cast<uint32_t*>(dst) = t;
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (out_col + i < p.rows) dst[i] = static_cast<uint8_t>(t >> (8 * i));
      }
    }
  }
}

// Block bx of the flat kernel: a large tensor cast as it lies in memory (no transposed copy, no
// epilogue), x read as one contiguous array, 16 bytes a load and kFlatLoads loads in flight per thread
// (a warp reads 512 contiguous bytes a load, where the tile's rows give bf16 64-byte pieces), and the
// codes of each load stored at once (8 bytes for bf16, 4 for f32). The same encode_row and amax as
// the tiles: the same bytes.
template <typename T, Fp8Format F, bool Divide>
__device__ __forceinline__ void quantize_flat_tile(const Params& p, int64_t bx) {
  constexpr int per_load = 16 / static_cast<int>(sizeof(T));
  const int64_t n = p.rows * p.cols, start = bx * kThreads * kFlatLoads * per_load;
  const float scale = *p.scale;
  const T* x = static_cast<const T*>(p.x);
  // The first element of this thread's load u.
  const auto element = [&](int u) { return start + (static_cast<int64_t>(u) * kThreads + threadIdx.x) * per_load; };
  uint4 raw[kFlatLoads];
#pragma unroll
  for (int u = 0; u < kFlatLoads; ++u) {
    const int64_t e = element(u);
    if (e + per_load <= n) {
      raw[u] = __ldcs(reinterpret_cast<const uint4*>(x + e));  // streamed: read once
    } else {  // the tensor's last elements; zeros (+0.0) past its end neither raise amax nor get stored
      T part[per_load] = {};
      for (int i = 0; e + i < n && i < per_load; ++i) part[i] = x[e + i];
      memcpy(&raw[u], part, sizeof(raw[u]));
    }
  }
  uint32_t amax = 0;
#pragma unroll
  for (int u = 0; u < kFlatLoads; ++u) {
    const int64_t e = element(u);
    const uint32_t words[4] = {raw[u].x, raw[u].y, raw[u].z, raw[u].w};
    uint32_t codes[per_load / 4];
#pragma unroll
    for (int g = 0; g < per_load / 4; ++g) {  // 4 values at a time: 4 f32 words or 2 words of bf16 pairs
      float v[4];
      if constexpr (sizeof(T) == 4) {
#pragma unroll
        for (int i = 0; i < 4; ++i) v[i] = __uint_as_float(words[i]);
      } else {
        to_floats(make_uint2(words[2 * g], words[2 * g + 1]), v);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) amax = max(amax, amax_bits(__float_as_uint(v[i])));
      codes[g] = encode_row<F, Divide>(v, scale);
    }
    if (p.q == nullptr || e >= n) continue;
    if (e + per_load <= n) {
      if constexpr (sizeof(T) == 4) {
        *reinterpret_cast<uint32_t*>(p.q + e) = codes[0];
      } else {
        *reinterpret_cast<uint2*>(p.q + e) = make_uint2(codes[0], codes[1]);
      }
    } else {
      for (int i = 0; e + i < n && i < per_load; ++i) p.q[e + i] = static_cast<uint8_t>(codes[i / 4] >> (8 * (i % 4)));
    }
  }
  block_amax<Divide>(p, amax, scale, bx == 0);
}

// Piece `piece` of p's column tile bx (one pass): its tiles in row order, and their values'
// column sums (bias_sum.cuh) added row by row as they go.
template <typename T, Fp8Format F, bool Divide>
__device__ __forceinline__ void quantize_piece(const Params& p, int64_t bx, int64_t piece) {
  sum_piece(p.sum, p.rows, p.cols, bx, piece, [&](int64_t by, BiasSumTile* sums) {
    quantize_tile<T, F, Divide, 1>(p, bx, by, sums);  // ends synchronised after the tile's puts
  });
}

// Tile (bx, by) of p in the tile that Passes names (kSmall, kSwiGlu, kFlat, kSums or the large tile's
// passes); kSums: piece by of column tile bx.
template <typename T, Fp8Format F, bool Divide, int Passes>
__device__ __forceinline__ void quantize_any_tile(const Params& p, int64_t bx, int64_t by) {
  if constexpr (Passes == kSums) {
    quantize_piece<T, F, Divide>(p, bx, by);
  } else if constexpr (Passes == kFlat) {
    quantize_flat_tile<T, F, Divide>(p, bx);
  } else if constexpr (Passes == kSmall) {
    quantize_small_tile<T, F, Divide>(p, bx, by);
  } else if constexpr (Passes == kSwiGlu) {
    quantize_tile<T, F, Divide, 1, true>(p, bx, by);
  } else {
    quantize_tile<T, F, Divide, Passes>(p, bx, by);
  }
}

// Blocks an SM keeps resident: the summing tile, whose blocks wait on their sums between tiles, is
// held to 64 registers so that 4 fit (80 left 3: fc1's gradient cast in the GPT layer 1862 us).
template <int Passes>
constexpr int kMinBlocks = Passes == kSums ? 4 : 1;

template <typename T, Fp8Format F, bool Divide, int Passes>
__global__ void __launch_bounds__(kThreads, kMinBlocks<Passes>) quantize_kernel(Params p) {
  wait_for_prior_grids();
  allow_dependent_launch();
  quantize_any_tile<T, F, Divide, Passes>(p, blockIdx.x, blockIdx.y);
}

// Up to kMaxBatch tensors in one launch, each in the grid of blocks its own launch would have (a
// tensor alone takes quantize_kernel: a launch's time at these sizes grows with its parameters).
constexpr int kMaxBatch = 16;
using Batch = LaunchBatch<Params, kMaxBatch>;

template <typename T, Fp8Format F, bool Divide, int Passes>
__global__ void __launch_bounds__(kThreads, kMinBlocks<Passes>) quantize_batch_kernel(const __grid_constant__ Batch b) {
  const BatchTile at = b.tile(blockIdx.x);
  quantize_any_tile<T, F, Divide, Passes>(b.m[at.member], at.x, at.y);
}

// The grid of p's launch in the tile that `passes` names, for inputs of type T.
template <typename T>
dim3 grid_of(const Params& p, int passes, const char* what) {
  if (passes == kFlat) {
    const int64_t per_block = int64_t{kThreads} * kFlatLoads * (16 / sizeof(T));
    const int64_t blocks = (p.rows * p.cols + per_block - 1) / per_block;
    if (blocks >= (int64_t{1} << 31))
      throw Error(std::string(what) + ": " + std::to_string(p.rows) + "x" + std::to_string(p.cols) +
                  " is too large for one launch; split it");
    return dim3(static_cast<unsigned>(std::max<int64_t>(1, blocks)));
  }
  // The large tile compiles SwiGLU's operands out (transformed<false>): a cast with them must not reach it.
  if (passes > 0 && has_swiglu_operands(p))
    throw Error(std::string(what) + ": a cast with SwiGLU's operands routed to the large tile (a launch bug)");
  const int64_t tile_rows = passes == kSmall    ? kSmallTile
                            : passes == kSwiGlu ? 64
                            : passes == kSums   ? 64 * p.sum.piece_tiles
                                                : 64 * passes;
  const int64_t tile_cols = passes == kSmall ? kSmallTile : kTileCols;
  if (p.rows > kMaxGridY * tile_rows)
    throw Error(std::string(what) + ": " + std::to_string(p.rows) + "x" + std::to_string(p.cols) +
                " has more rows than one launch covers (" +
                std::to_string(kMaxGridY * tile_rows) + "); split it");
  return dim3(static_cast<unsigned>(std::max<int64_t>(1, (p.cols + tile_cols - 1) / tile_cols)),
              static_cast<unsigned>(std::max<int64_t>(1, (p.rows + tile_rows - 1) / tile_rows)));
}

template <int Passes, typename T, Fp8Format F>
void launch_passes(const Params& p, bool divide, cudaStream_t stream) {
  const dim3 grid = grid_of<T>(p, Passes, "quantize_fp8");
  if (divide) {
    launch_dependent(quantize_kernel<T, F, true, Passes>, grid, dim3(kThreads), 0, stream, 1, p);
  } else {
    launch_dependent(quantize_kernel<T, F, false, Passes>, grid, dim3(kThreads), 0, stream, 1, p);
  }
}

bool small(const Params& p) { return p.rows * p.cols < kSmallTensor; }
// Whether an fp32 p takes the large tile with one pass (kMediumTensor, or an epilogue or gradient to
// apply; rows within one launch's grid: beyond, 4,194,240 rows, the 2-pass tile takes them all).
bool medium(const Params& p) {
  return (p.rows * p.cols < kMediumTensor || p.epilogue.active() || p.gradient_active) && p.rows <= kMaxGridY * 64;
}

// Whether p takes the flat kernel: a large tensor cast as it lies (no transposed copy, no epilogue
// or gradient), x 16-byte aligned and q aligned for one store per load.
template <typename T>
bool flat(const Params& p) {
  return !small(p) && p.q_t == nullptr && !p.epilogue.active() && !p.gradient_active && aligned(p.x, 16) &&
         aligned(p.q, 16 / sizeof(T));  // 8 codes per load of bf16, 4 of f32
}

template <typename T, Fp8Format F>
void launch(const Params& p, bool divide, cudaStream_t stream) {
  if (p.sum.out != nullptr) return launch_passes<kSums, T, F>(p, divide, stream);
  if (small(p)) return launch_passes<kSmall, T, F>(p, divide, stream);
  if (flat<T>(p)) return launch_passes<kFlat, T, F>(p, divide, stream);
  if constexpr (sizeof(T) == 4) {
    if (has_swiglu_operands(p)) return launch_passes<kSwiGlu, T, F>(p, divide, stream);
    if (medium(p)) return launch_passes<1, T, F>(p, divide, stream);
  }
  launch_passes<kPasses<T>, T, F>(p, divide, stream);
}

template <int Passes, typename T, Fp8Format F>
void launch_batch_passes(const Params* p, int count, bool divide, cudaStream_t stream) {
  Batch b{};
  for (int t = 0; t < count; ++t) {
    const dim3 grid = grid_of<T>(p[t], Passes, "quantize_fp8_batch");
    b.add(p[t], grid.x, grid.y);
  }
  if (std::all_of(p, p + count, [&](const Params& q) { return q.x == p[0].x; })) b.interleave();
  const unsigned blocks = b.blocks("quantize_fp8_batch");
  if (divide) {
    quantize_batch_kernel<T, F, true, Passes><<<blocks, kThreads, 0, stream>>>(b);
  } else {
    quantize_batch_kernel<T, F, false, Passes><<<blocks, kThreads, 0, stream>>>(b);
  }
}

// A batch takes the summing tile when its tensors sum bias gradients (all or none: quantize_fp8_batch),
// else the small tile when every tensor in it is small, the flat kernel when every one can
// (every tile gives the same bytes), else the SwiGLU tile when one of them has SwiGLU's operands, else
// one pass when every one is medium.
template <typename T, Fp8Format F>
void launch_batch(const Params* p, int count, bool divide, cudaStream_t stream) {
  if (p[0].sum.out != nullptr) return launch_batch_passes<kSums, T, F>(p, count, divide, stream);
  if (std::all_of(p, p + count, small)) return launch_batch_passes<kSmall, T, F>(p, count, divide, stream);
  if (std::all_of(p, p + count, flat<T>)) return launch_batch_passes<kFlat, T, F>(p, count, divide, stream);
  if constexpr (sizeof(T) == 4) {
    if (std::any_of(p, p + count, has_swiglu_operands))
      return launch_batch_passes<kSwiGlu, T, F>(p, count, divide, stream);
    if (std::all_of(p, p + count, medium)) return launch_batch_passes<1, T, F>(p, count, divide, stream);
  }
  launch_batch_passes<kPasses<T>, T, F>(p, count, divide, stream);
}

// quantize_fp8_gemm: block y covers rows [32 y, 32 y + 32) of x: the small tiles of those rows (codes
// kept in shared memory), then the block's [32, n] of the GEMM, warp per 16 x 8 output tile
// (mma.sync m16n8k32: one instruction per 32 of k, fp32 accumulation), w staged in shared memory
// (its loads issued before the quantization, which hides them).
constexpr int kMaxGemmK = 128;        // x's cols
constexpr int kMaxGemmWords = 4;      // w's bytes per thread / 4: n * k <= 4096
constexpr int kMaxGemmN = 4 * kThreads * kMaxGemmWords / kSmallTile;  // n at k = 32
constexpr int kPad = 16;  // bytes after each row of codes and of w in shared memory: no bank conflicts
constexpr int kCodesStride = kMaxGemmK + kPad;
static_assert(kSmallTile == kQuantizeGemmTile && kMaxGemmK == kQuantizeGemmMaxK &&
                  4 * kThreads * kMaxGemmWords == kQuantizeGemmMaxWeights,
              "quantize_fp8_gemm_fits (ops/cuda/quantize_gemm_fits.h) says which shapes this kernel takes");

// d += a b for one m16n8k32 tile of FP8 codes (A row-major 16 x 32, B "col" = w rows 8 x 32).
template <Fp8Format A, Fp8Format B>
__device__ __forceinline__ void mma_fp8(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2]) {
#define FP8KIT_MMA(types)                                                                                    \
  asm volatile("mma.sync.aligned.m16n8k32.row.col.f32." types ".f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, " \
               "{%0,%1,%2,%3};\n"                                                                            \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])                                              \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]))
  if constexpr (A == Fp8Format::E4M3 && B == Fp8Format::E4M3) {
    FP8KIT_MMA("e4m3.e4m3");
  } else if constexpr (A == Fp8Format::E4M3) {
    FP8KIT_MMA("e4m3.e5m2");
  } else if constexpr (B == Fp8Format::E4M3) {
    FP8KIT_MMA("e5m2.e4m3");
  } else {
    FP8KIT_MMA("e5m2.e5m2");
  }
#undef FP8KIT_MMA
}

struct GemmOperand {
  const uint8_t* w;  // [n, k] codes, row-major
  int64_t n;
  const float* x_scale_inv;
  const float* w_scale_inv;
  float* y;  // [rows, n]
};

template <Fp8Format F, Fp8Format W, bool Divide>
__global__ void __launch_bounds__(kThreads) quantize_gemm_kernel(Params p, GemmOperand g) {
  __shared__ __align__(16) uint8_t codes[kSmallTile * kCodesStride];
  __shared__ uint32_t w_words[kThreads * kMaxGemmWords + kMaxGemmN * kPad / 4];  // rows of k + kPad bytes
  const int k = static_cast<int>(p.cols), n = static_cast<int>(g.n), words = n * k / 4;
  const int row_words = k / 4, stride_words = row_words + kPad / 4;
  uint32_t w_mine[kMaxGemmWords];
#pragma unroll
  for (int i = 0; i < kMaxGemmWords; ++i) {
    const int word = threadIdx.x + kThreads * i;
    if (word < words) w_mine[i] = reinterpret_cast<const uint32_t*>(g.w)[word];
  }
  for (int chunk = 0; chunk < k / kSmallTile; ++chunk) {
    if (chunk > 0) __syncthreads();  // the tile's transposed words of the previous chunk are read
    quantize_small_tile<float, F, Divide>(p, chunk, blockIdx.y, codes + kSmallTile * chunk, kCodesStride);
  }
#pragma unroll
  for (int i = 0; i < kMaxGemmWords; ++i) {
    const int word = threadIdx.x + kThreads * i;
    if (word < words) w_words[word / row_words * stride_words + word % row_words] = w_mine[i];
  }
  __syncthreads();

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, group = lane / 4, quad = lane % 4;
  const float alpha = __fmul_rn(g.x_scale_inv != nullptr ? *g.x_scale_inv : 1.0f,
                                g.w_scale_inv != nullptr ? *g.w_scale_inv : 1.0f);
  const uint8_t* w_bytes = reinterpret_cast<const uint8_t*>(w_words);
  for (int tile = warp; tile < 2 * (n / 8); tile += kThreads / 32) {
    const int m0 = 16 * (tile % 2), n0 = 8 * (tile / 2);
    float d[4] = {};
    for (int k0 = 0; k0 < k; k0 += 32) {
      const uint8_t* a_row = codes + (m0 + group) * kCodesStride + k0 + 4 * quad;
      const uint32_t a[4] = {*reinterpret_cast<const uint32_t*>(a_row),
                             *reinterpret_cast<const uint32_t*>(a_row + 8 * kCodesStride),
                             *reinterpret_cast<const uint32_t*>(a_row + 16),
                             *reinterpret_cast<const uint32_t*>(a_row + 8 * kCodesStride + 16)};
      const uint8_t* b_row = w_bytes + (n0 + group) * 4 * stride_words + k0 + 4 * quad;
      const uint32_t b[2] = {*reinterpret_cast<const uint32_t*>(b_row), *reinterpret_cast<const uint32_t*>(b_row + 16)};
      mma_fp8<F, W>(d, a, b);
    }
    const int64_t row = static_cast<int64_t>(blockIdx.y) * kSmallTile + m0 + group;
    const int col = n0 + 2 * quad;
    if (row < p.rows) *reinterpret_cast<float2*>(g.y + row * n + col) = make_float2(__fmul_rn(alpha, d[0]), __fmul_rn(alpha, d[1]));
    if (row + 8 < p.rows)
      *reinterpret_cast<float2*>(g.y + (row + 8) * n + col) = make_float2(__fmul_rn(alpha, d[2]), __fmul_rn(alpha, d[3]));
  }
}

template <Fp8Format F, Fp8Format W>
void launch_gemm(const Params& p, const GemmOperand& g, bool divide, cudaStream_t stream) {
  const dim3 grid = grid_of<float>(p, kSmall, "quantize_fp8_gemm");
  const dim3 one_column(1, grid.y);  // the kernel walks k itself
  if (divide) {
    quantize_gemm_kernel<F, W, true><<<one_column, kThreads, 0, stream>>>(p, g);
  } else {
    quantize_gemm_kernel<F, W, false><<<one_column, kThreads, 0, stream>>>(p, g);
  }
}

// Whether args' cast sums its bias gradient in its own tiles (kSums; the other tiles leave it to
// bias_backward).
bool sums_in_tile(const QuantizeArgs& args) {
  return tile_sums(args.bias_sum, args.rows, args.cols) &&
         args.bias_sum.order.pieces(args.rows) <= kMaxGridY;
}

// Checks args (naming what is wrong) and derives the kernel's parameters.
Params params_of(const QuantizeArgs& args) {
  // The message's shape, built only to throw (this runs for every tensor of every call).
  const auto shape = [&] { return std::to_string(args.rows) + "x" + std::to_string(args.cols); };
  if (args.rows < 0 || args.cols < 0) throw Error("quantize_fp8: negative shape " + shape());
  if (args.x_type != DType::F32 && args.x_type != DType::Bf16)
    throw Error("quantize_fp8: input must be f32 or bf16, got " + std::string(name(args.x_type)));
  if (args.scale == nullptr) throw Error("quantize_fp8: scale is null (a device pointer to one float is required)");
  if (args.x == nullptr && args.rows * args.cols > 0)
    throw Error("quantize_fp8: x is null for a " + shape() + " input");
  if (args.scale_inv != nullptr && args.scale_inv == args.scale)
    throw Error("quantize_fp8: scale_inv must not alias scale (blocks still read scale while it is written)");
  check_epilogue(args.epilogue, args.gradient, "quantize_fp8");
  if ((args.epilogue.active() || args.gradient.active()) && args.x_type != DType::F32)
    throw Error("quantize_fp8: a Linear epilogue or its gradient needs an f32 input");

  if (args.bias_sum.grad != nullptr && (args.bias_sum.workspace == nullptr || args.gradient.swiglu != ops::SwiGluPart::None))
    throw Error("quantize_fp8: a bias sum needs its workspace and a gradient other than SwiGLU's");
  // bias_backward, which sums where the tile does not, reads f32.
  if (args.bias_sum.grad != nullptr && args.x_type != DType::F32 && !sums_in_tile(args))
    throw Error("quantize_fp8: a bf16 gradient's bias sum needs the summing tile (" + shape() +
                " is too small for it: cast_sums_bias); convert it to f32 first");

  const size_t element = args.x_type == DType::F32 ? 4 : 2;
  const SwiGluOperands swiglu = swiglu_operands(args.epilogue, args.gradient);  // loaded as x is
  return Params{args.x, args.rows, args.cols, args.scale, args.q, args.q_t, args.amax, args.scale_inv,
                args.cols % 4 == 0 && aligned(args.x, 4 * element) && aligned(swiglu.first, 16) &&
                    aligned(swiglu.second, 16),
                args.cols % 4 == 0 && aligned(args.q, 4),
                args.rows % 16 == 0 && aligned(args.q_t, 16), args.epilogue,
                args.cols % 4 == 0 && aligned(args.epilogue.y, 16), args.cols % 4 == 0 && aligned(args.epilogue.pre, 16),
                args.gradient.active(),
                epilogue_gradient_args(args.gradient, args.rows, args.cols, "quantize_fp8"),
                sums_in_tile(args) ? bias_sum_args(args.bias_sum, args.rows) : BiasSumArgs{}};
}

// After args' cast: its bias sum's last step, or the whole sum where the cast's tile did not take it.
void finish_bias_sum(const QuantizeArgs& args, const Params& p, cudaStream_t stream) {
  cuda::finish_bias_sum(args.bias_sum, p.sum.out != nullptr, static_cast<const float*>(args.x), args.gradient,
                        args.rows, args.cols, stream);
}

}  // namespace

void quantize_fp8(const QuantizeArgs& args, cudaStream_t stream) {
  const Params p = params_of(args);
  const bool e4m3 = args.format == Fp8Format::E4M3;
  if (args.x_type == DType::F32) {
    e4m3 ? launch<float, Fp8Format::E4M3>(p, args.divide, stream)
         : launch<float, Fp8Format::E5M2>(p, args.divide, stream);
  } else {
    e4m3 ? launch<uint16_t, Fp8Format::E4M3>(p, args.divide, stream)
         : launch<uint16_t, Fp8Format::E5M2>(p, args.divide, stream);
  }
  check_launch("quantize_fp8");
  finish_bias_sum(args, p, stream);
}

void quantize_fp8_batch(std::span<const QuantizeArgs> args, cudaStream_t stream) {
  for (size_t start = 0; start < args.size(); start += kMaxBatch) {
    const int count = static_cast<int>(std::min<size_t>(kMaxBatch, args.size() - start));
    const QuantizeArgs& first = args[start];
    Params p[kMaxBatch];
    for (int t = 0; t < count; ++t) {
      const QuantizeArgs& a = args[start + t];
      if (a.x_type != first.x_type || a.format != first.format || a.divide != first.divide)
        throw Error("quantize_fp8_batch: tensor " + std::to_string(start + t) +
                    " differs from the first of its launch in input type, format or scaling mode; batch them apart");
      p[t] = params_of(a);
    }
    // The summing tile for all of them or none (the others' sums by bias_backward after the launch,
    // which reads f32).
    if (!std::all_of(p, p + count, [](const Params& q) { return q.sum.out != nullptr; })) {
      for (int t = 0; t < count; ++t) {
        if (first.x_type != DType::F32 && args[start + t].bias_sum.grad != nullptr)
          throw Error("quantize_fp8_batch: bf16 gradients' bias sums need the summing tile for every tensor of "
                      "the launch; cast them apart");
        p[t].sum = {};
      }
    }
    const bool e4m3 = first.format == Fp8Format::E4M3;
    if (first.x_type == DType::F32) {
      e4m3 ? launch_batch<float, Fp8Format::E4M3>(p, count, first.divide, stream)
           : launch_batch<float, Fp8Format::E5M2>(p, count, first.divide, stream);
    } else {
      e4m3 ? launch_batch<uint16_t, Fp8Format::E4M3>(p, count, first.divide, stream)
           : launch_batch<uint16_t, Fp8Format::E5M2>(p, count, first.divide, stream);
    }
    check_launch("quantize_fp8_batch");
    for (int t = 0; t < count; ++t) finish_bias_sum(args[start + t], p[t], stream);
  }
}

void quantize_fp8_gemm(const QuantizeArgs& x, const uint8_t* w, Fp8Format w_format, int64_t n,
                       const float* x_scale_inv, const float* w_scale_inv, float* y, cudaStream_t stream) {
  if (!quantize_fp8_gemm_fits(x.cols, n))
    throw Error("quantize_fp8_gemm: " + std::to_string(x.rows) + "x" + std::to_string(x.cols) + " . " +
                std::to_string(n) + "x" + std::to_string(x.cols) +
                " does not fit (k a multiple of 32 up to 128, n a multiple of 8, n k <= 4096); quantize and multiply "
                "apart");
  if (x.bias_sum.grad != nullptr)
    throw Error("quantize_fp8_gemm: no bias sum in this launch (its small tiles); sum with bias_backward");
  if (x.x_type != DType::F32)
    throw Error("quantize_fp8_gemm: x is " + std::string(name(x.x_type)) +
                "; it takes f32 only (quantize_fp8, then the GEMM, for bf16)");
  if (x.scale_inv != nullptr && (x_scale_inv == x.scale_inv || w_scale_inv == x.scale_inv))
    throw Error("quantize_fp8_gemm: x.scale_inv is written during the launch, while the GEMM reads its scale_invs; "
                "pass the GEMM other pointers (e.g. the scale_inv the codes were made for, kept apart)");
  if (w == nullptr || !aligned(w, 4))
    throw Error("quantize_fp8_gemm: w must be a 4-byte aligned device pointer");
  if (y == nullptr || !aligned(y, 8))
    throw Error("quantize_fp8_gemm: y must be an 8-byte aligned device pointer");
  const auto overlaps = [&](const void* other, int64_t bytes) {
    const auto a = reinterpret_cast<uintptr_t>(y), b = reinterpret_cast<uintptr_t>(other);
    return other != nullptr && a < b + bytes && b < a + x.rows * n * sizeof(float);
  };
  const int64_t elements = x.rows * x.cols;
  if (overlaps(x.x, elements * 4) || overlaps(x.q, elements) || overlaps(x.q_t, elements) ||
      overlaps(x.epilogue.y, elements * 4) || overlaps(x.epilogue.pre, elements * 4) ||
      overlaps(x.epilogue.up, elements * 4))
    throw Error("quantize_fp8_gemm: y overlaps x, q, q_t or the epilogue's tensors, which other blocks still read "
                "or write; "
                "give y its own memory");
  const Params p = params_of(x);
  const GemmOperand g{w, n, x_scale_inv, w_scale_inv, y};
  const bool e4m3 = x.format == Fp8Format::E4M3, w_e4m3 = w_format == Fp8Format::E4M3;
  if (e4m3) {
    w_e4m3 ? launch_gemm<Fp8Format::E4M3, Fp8Format::E4M3>(p, g, x.divide, stream)
           : launch_gemm<Fp8Format::E4M3, Fp8Format::E5M2>(p, g, x.divide, stream);
  } else {
    w_e4m3 ? launch_gemm<Fp8Format::E5M2, Fp8Format::E4M3>(p, g, x.divide, stream)
           : launch_gemm<Fp8Format::E5M2, Fp8Format::E5M2>(p, g, x.divide, stream);
  }
  check_launch("quantize_fp8_gemm");
}

}  // namespace fp8kit::cuda
