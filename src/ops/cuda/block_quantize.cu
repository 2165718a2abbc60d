// Block-scaled FP8 quantization kernels (block_quantize.h), each one read of x from DRAM. Every lane
// loads 16 bytes at a time: 4 fp32 or 8 bf16 elements (kVec).
//
// Group (1 x G, G = 32, 64, 128): a block of 256 threads per 8 rows x 4 chunks of 32 kVec columns, a
// warp per row (lane l: columns kVec l .. kVec l + kVec - 1 of each chunk, the 4 chunks' loads in
// flight before the first is used). The G / kVec lanes of a group reduce its amax with xor shuffles
// and cast it from registers; then the row segment's amaxes and scales are gathered into the first
// lanes, one contiguous store per array. (Stored by each group's first lane, 4-byte writes scattered
// across blocks, they held 1 x 32 at 84% of the copy's bandwidth; gathered, 91-93%.)
//
// Row (1 x cols): a block of 1024 / kVec threads per row (thread t: columns kVec t .. of each 1024),
// the first 8 chunks of 1024 held in registers while the block reduces the row's amax, so rows of up
// to 8192 columns are read once; longer rows re-read the rest for the cast.
//
// Tile128 (128 x 128): a block of 256 threads per tile, warp w rows 16w .. 16w + 15, 128 / kVec lanes
// per row (16 loads in flight per thread of fp32, 8 of bf16); amax by warp, then block; the transposed
// codes go through shared memory as 4 x 4 byte transposes, 128 bytes per transposed row out.
//
// Every block's scale is numerics' current_scale (scale.cuh) and its codes encode_row's, so the
// bytes are those of numerics::quantize_blocks. Elements outside the matrix load as +0: they neither
// raise an amax nor get stored.
#include "ops/cuda/block_quantize.h"

#include <algorithm>
#include <string>

#include "base/error.h"
#include "ops/cuda/aligned.h"
#include "ops/cuda/fp8_cast.cuh"
#include "ops/cuda/scale.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;  // Group's and Tile128's blocks
constexpr int kGroupChunks = 4;             // chunks of a row per warp (Group)
constexpr int kRowChunk = 1024;             // columns per block step (Row)
constexpr int kRowKept = 8;                 // chunks of a row held in registers (Row)
constexpr int kTile = 128;                  // Tile128's rows and columns
constexpr int kTileStride = kTile / 4 + 1;  // words per transposed row in shared memory (+1: fewer bank conflicts)

// Elements of x per 16-byte load: every lane loads 16 bytes at a time, whatever x's type (with 8-byte
// loads of bf16 the kernels held 59-71% of the copy's bandwidth, fp32's 90-93%).
template <typename T>
constexpr int kVec = 16 / static_cast<int>(sizeof(T));
// Row's threads per block: a block step covers kRowChunk columns of either type.
template <typename T>
constexpr int kRowThreads = kRowChunk / kVec<T>;

struct Params {
  const void* x;
  int64_t rows, cols;
  float fp8_max;
  int margin;
  bool power_of_two;
  uint8_t* q;
  uint8_t* q_t;
  float* scale_inv;
  float* amax;
  int64_t grid_cols;    // blocks per row of the scale grid
  bool vector_load;     // every row of x starts 16-byte aligned
  bool vector_store;    // every row of q starts kVec-byte aligned
  bool vector_store_t;  // every row of q_t starts 16-byte aligned
};

// x[row, col .. col + kVec - 1] as loaded (4 fp32 or 8 bf16); +0 outside the matrix. Streamed (read
// once, kept out of the caches' way) unless Reread (a long row's second pass reads it again).
template <typename T, bool Reread = false>
__device__ __forceinline__ uint4 load_raw(const Params& p, int64_t row, int64_t col) {
  constexpr int V = kVec<T>;
  if (row >= p.rows || col >= p.cols) return make_uint4(0, 0, 0, 0);
  const T* src = static_cast<const T*>(p.x) + row * p.cols + col;
  if (p.vector_load && col + V - 1 < p.cols) {
    const uint4* vector = reinterpret_cast<const uint4*>(src);
    return Reread ? *vector : __ldcs(vector);
  }
  uint32_t e[V] = {};
#pragma unroll
  for (int i = 0; i < V; ++i)
    if (col + i < p.cols) {
      if constexpr (sizeof(T) == 4) e[i] = __float_as_uint(src[i]);
      else e[i] = src[i];
    }
  if constexpr (sizeof(T) == 4) return make_uint4(e[0], e[1], e[2], e[3]);
  else return make_uint4(e[0] | (e[1] << 16), e[2] | (e[3] << 16), e[4] | (e[5] << 16), e[6] | (e[7] << 16));
}

template <typename T>
__device__ __forceinline__ void to_floats(const uint4& raw, float (&v)[kVec<T>]) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (sizeof(T) == 4) {
      v[i] = __uint_as_float(words[i]);
    } else {
      v[2 * i] = bf16_to_float(words[i] & 0xFFFFu), v[2 * i + 1] = bf16_to_float(words[i] >> 16);
    }
  }
}

// max(amax, |v[i]|) as ordered bits (NaN ignored, inf counted).
template <int V>
__device__ __forceinline__ uint32_t raise_amax(uint32_t amax, const float (&v)[V]) {
#pragma unroll
  for (int i = 0; i < V; ++i) amax = max(amax, amax_bits(__float_as_uint(v[i])));
  return amax;
}

// The codes of v in words of 4 (word i: v[4i .. 4i + 3]).
template <Fp8Format F, int V>
__device__ __forceinline__ void encode(const float (&v)[V], float scale, uint32_t (&w)[V / 4]) {
#pragma unroll
  for (int i = 0; i < V / 4; ++i) w[i] = encode_row<F, false>(v + 4 * i, scale);
}

// Codes w of x[row, col .. col + 4 * N - 1] into q (the parts inside the matrix).
template <int N>
__device__ __forceinline__ void store_codes(const Params& p, int64_t row, int64_t col, const uint32_t (&w)[N]) {
  if (row >= p.rows || col >= p.cols) return;
  uint8_t* dst = p.q + row * p.cols + col;
  if (p.vector_store && col + 4 * N - 1 < p.cols) {
    if constexpr (N == 1) *reinterpret_cast<uint32_t*>(dst) = w[0];
    else *reinterpret_cast<uint2*>(dst) = make_uint2(w[0], w[1]);
    return;
  }
#pragma unroll
  for (int i = 0; i < 4 * N; ++i)
    if (col + i < p.cols) dst[i] = static_cast<uint8_t>(w[i / 4] >> (8 * (i % 4)));
}

__device__ __forceinline__ void store_block(const Params& p, int64_t block, float amax, float scale) {
  p.scale_inv[block] = __frcp_rn(scale);  // 1 / scale, correctly rounded as the division
  p.amax[block] = amax;
}

// Group: chunks of 32 kVec columns, a lane kVec columns of each, G / kVec lanes per group.
template <typename T, Fp8Format F, int G>
__global__ void __launch_bounds__(kThreads) group_kernel(Params p) {
  constexpr int V = kVec<T>;
  constexpr int chunk = 32 * V;                     // columns per chunk
  constexpr int lanes = G / V;                      // lanes per group
  constexpr int per_chunk = chunk / G;              // groups per chunk
  constexpr int groups = kGroupChunks * per_chunk;  // groups of the warp's row segment
  static_assert(groups <= 32, "a segment's groups are gathered into one warp's lanes");
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.y) * kWarps + threadIdx.x / 32;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kGroupChunks * chunk;  // the segment's first column
  uint4 raw[kGroupChunks];
#pragma unroll
  for (int c = 0; c < kGroupChunks; ++c) raw[c] = load_raw<T>(p, row, first + c * chunk + V * lane);
  float amaxes[kGroupChunks], scales[kGroupChunks];
#pragma unroll
  for (int c = 0; c < kGroupChunks; ++c) {
    float v[V];
    to_floats<T>(raw[c], v);
    uint32_t amax = raise_amax(0, v);
#pragma unroll
    for (int offset = lanes / 2; offset > 0; offset /= 2) amax = max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
    amaxes[c] = __uint_as_float(amax);
    scales[c] = current_scale(amaxes[c], p.fp8_max, p.margin, p.power_of_two);
    uint32_t w[V / 4];
    encode<F>(v, scales[c], w);
    store_codes(p, row, first + c * chunk + V * lane, w);
  }
  // The segment's groups' amaxes and scales gathered into lanes 0 .. groups - 1 (group j from chunk
  // j / per_chunk's lane (j % per_chunk) * lanes), so that each array gets one contiguous store.
  const int c_of = lane / per_chunk, source = lane % per_chunk * lanes;
  float a = 0.0f, scale = 1.0f;
#pragma unroll
  for (int c = 0; c < kGroupChunks; ++c) {
    const float ac = __shfl_sync(0xFFFFFFFFu, amaxes[c], source), sc = __shfl_sync(0xFFFFFFFFu, scales[c], source);
    if (c == c_of) a = ac, scale = sc;
  }
  if (lane < groups && row < p.rows && first + lane * G < p.cols) store_block(p, row * p.grid_cols + first / G + lane, a, scale);
}

// The block's maximum of each thread's `amax`, in every thread.
template <int Warps>
__device__ __forceinline__ uint32_t block_max(uint32_t amax) {
  __shared__ uint32_t warp_amax[Warps];
  amax = __reduce_max_sync(0xFFFFFFFFu, amax);
  if (threadIdx.x % 32 == 0) warp_amax[threadIdx.x / 32] = amax;
  __syncthreads();
#pragma unroll
  for (int i = 0; i < Warps; ++i) amax = max(amax, warp_amax[i]);
  return amax;
}

template <typename T, Fp8Format F>
__global__ void __launch_bounds__(kRowThreads<T>) row_kernel(Params p) {
  constexpr int V = kVec<T>;
  const int64_t row = blockIdx.x;
  const int64_t chunks = (p.cols + kRowChunk - 1) / kRowChunk;
  const int64_t col0 = V * threadIdx.x;
  uint4 raw[kRowKept];
#pragma unroll
  for (int c = 0; c < kRowKept; ++c) raw[c] = load_raw<T>(p, row, c * kRowChunk + col0);
  uint32_t amax = 0;
  float v[V];
#pragma unroll
  for (int c = 0; c < kRowKept; ++c) {
    to_floats<T>(raw[c], v);
    amax = raise_amax(amax, v);
  }
  for (int64_t c = kRowKept; c < chunks; ++c) {
    to_floats<T>(load_raw<T, true>(p, row, c * kRowChunk + col0), v);
    amax = raise_amax(amax, v);
  }
  amax = block_max<kRowThreads<T> / 32>(amax);
  const float a = __uint_as_float(amax), scale = current_scale(a, p.fp8_max, p.margin, p.power_of_two);
  uint32_t w[V / 4];
#pragma unroll
  for (int c = 0; c < kRowKept; ++c) {
    to_floats<T>(raw[c], v);
    encode<F>(v, scale, w);
    store_codes(p, row, c * kRowChunk + col0, w);
  }
  for (int64_t c = kRowKept; c < chunks; ++c) {
    to_floats<T>(load_raw<T>(p, row, c * kRowChunk + col0), v);
    encode<F>(v, scale, w);
    store_codes(p, row, c * kRowChunk + col0, w);
  }
  if (threadIdx.x == 0) store_block(p, row, a, scale);
}

// Tile128: warp w takes rows 16w .. 16w + 15 of the tile, kTile / kVec lanes per row, so a lane has
// 16 rows of 4 fp32 columns or 8 rows of 8 bf16 columns (16 16-byte loads in flight, or 8).
template <typename T, Fp8Format F>
__global__ void __launch_bounds__(kThreads) tile_kernel(Params p) {
  constexpr int V = kVec<T>;
  constexpr int kRows = kTile / kWarps;            // rows per warp
  constexpr int kRowLanes = kTile / V;             // lanes per row
  constexpr int kLaneRows = kRows * kRowLanes / 32;  // rows per lane
  __shared__ uint32_t tile_t[kTile * kTileStride];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int first_row = warp * kRows + lane / kRowLanes * kLaneRows;  // the lane's first row in the tile
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTile + first_row;
  const int col_in_tile = V * (lane % kRowLanes);
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kTile + col_in_tile;
  uint4 raw[kLaneRows];
#pragma unroll
  for (int r = 0; r < kLaneRows; ++r) raw[r] = load_raw<T>(p, row0 + r, col);
  uint32_t amax = 0;
  float v[V];
#pragma unroll
  for (int r = 0; r < kLaneRows; ++r) {
    to_floats<T>(raw[r], v);
    amax = raise_amax(amax, v);
  }
  amax = block_max<kWarps>(amax);
  const float a = __uint_as_float(amax), scale = current_scale(a, p.fp8_max, p.margin, p.power_of_two);
  uint32_t w[kLaneRows][V / 4];
#pragma unroll
  for (int r = 0; r < kLaneRows; ++r) {
    to_floats<T>(raw[r], v);
    encode<F>(v, scale, w[r]);
    store_codes(p, row0 + r, col, w[r]);
  }
  if (threadIdx.x == 0) store_block(p, static_cast<int64_t>(blockIdx.y) * p.grid_cols + blockIdx.x, a, scale);
  if (p.q_t == nullptr) return;  // the same for the whole block

  // Word (c, j) of tile_t: column c of the tile, rows 4j .. 4j + 3 in bytes 0..3.
#pragma unroll
  for (int r4 = 0; r4 < kLaneRows / 4; ++r4) {
#pragma unroll
    for (int h = 0; h < V / 4; ++h) {
      const uint32_t rows[4] = {w[4 * r4][h], w[4 * r4 + 1][h], w[4 * r4 + 2][h], w[4 * r4 + 3][h]};
      uint32_t columns[4];
      transpose_4x4(rows, columns);
#pragma unroll
      for (int i = 0; i < 4; ++i) tile_t[(col_in_tile + 4 * h + i) * kTileStride + first_row / 4 + r4] = columns[i];
    }
  }
  __syncthreads();
  // 128 transposed rows of 128 bytes: 8 threads per row, 16 bytes each.
#pragma unroll
  for (int round = 0; round < kTile * 8 / kThreads; ++round) {
    const int id = threadIdx.x + kThreads * round;
    const int c = id / 8, chunk = id % 8;
    const int64_t out_row = static_cast<int64_t>(blockIdx.x) * kTile + c;  // a column of x
    const int64_t out_col = static_cast<int64_t>(blockIdx.y) * kTile + 16 * chunk;
    if (out_row >= p.cols || out_col >= p.rows) continue;
    const uint32_t* t = tile_t + c * kTileStride + 4 * chunk;
    const uint32_t words[4] = {t[0], t[1], t[2], t[3]};
    uint8_t* dst = p.q_t + out_row * p.rows + out_col;
    if (p.vector_store_t && out_col + 15 < p.rows) {
      *reinterpret_cast<uint4*>(dst) = make_uint4(words[0], words[1], words[2], words[3]);
    } else {
#pragma unroll
      for (int i = 0; i < 16; ++i)
        if (out_col + i < p.rows) dst[i] = static_cast<uint8_t>(words[i / 4] >> (8 * i % 32));
    }
  }
}

template <Fp8Format F>
__global__ void dequantize_kernel(const uint8_t* q, int64_t rows, int64_t cols, int64_t block_rows, int64_t block_cols,
                                  int64_t grid_cols, const float* scale_inv, float* out) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / cols, c = i % cols;
    out[i] = __fmul_rn(decode_fp8<F>(q[i]), scale_inv[r / block_rows * grid_cols + c / block_cols]);
  }
}

template <typename T, Fp8Format F>
void launch(const Params& p, BlockKind kind, int group, cudaStream_t stream) {
  switch (kind) {
    case BlockKind::Group: {
      constexpr int64_t segment = kGroupChunks * 32 * kVec<T>;  // columns per block
      const dim3 grid(static_cast<unsigned>((p.cols + segment - 1) / segment),
                      static_cast<unsigned>((p.rows + kWarps - 1) / kWarps));
      if (group == 32) group_kernel<T, F, 32><<<grid, kThreads, 0, stream>>>(p);
      if (group == 64) group_kernel<T, F, 64><<<grid, kThreads, 0, stream>>>(p);
      if (group == 128) group_kernel<T, F, 128><<<grid, kThreads, 0, stream>>>(p);
      return;
    }
    case BlockKind::Row:
      row_kernel<T, F><<<static_cast<unsigned>(p.rows), kRowThreads<T>, 0, stream>>>(p);
      return;
    case BlockKind::Tile128: {
      const dim3 grid(static_cast<unsigned>((p.cols + kTile - 1) / kTile), static_cast<unsigned>((p.rows + kTile - 1) / kTile));
      tile_kernel<T, F><<<grid, kThreads, 0, stream>>>(p);
      return;
    }
  }
}

}  // namespace

void quantize_blocks(const BlockQuantizeArgs& args, cudaStream_t stream) {
  // The message's shape, built only to throw.
  const auto shape = [&] { return std::to_string(args.rows) + "x" + std::to_string(args.cols); };
  if (args.rows < 0 || args.cols < 0) throw Error("quantize_blocks: negative shape " + shape());
  if (args.x_type != DType::F32 && args.x_type != DType::Bf16)
    throw Error("quantize_blocks: x must be f32 or bf16, got " + std::string(name(args.x_type)));
  if (args.kind == BlockKind::Group && args.group != 32 && args.group != 64 && args.group != 128)
    throw Error("quantize_blocks: group must be 32, 64 or 128, got " + std::to_string(args.group));
  if (args.q_t != nullptr && args.kind != BlockKind::Tile128)
    throw Error("quantize_blocks: transposed codes need 128x128 blocks (a row's or group's scales do not transpose)");
  if (args.rows == 0 || args.cols == 0) return;
  if (args.x == nullptr || args.q == nullptr || args.scale_inv == nullptr || args.amax == nullptr)
    throw Error("quantize_blocks: x, q, scale_inv and amax must be device pointers for a " + shape() + " input");
  if (args.kind == BlockKind::Tile128 && (args.rows + kTile - 1) / kTile > 65535)
    throw Error("quantize_blocks: " + shape() + " has more 128-row tiles than one launch covers (65535); split it");
  if (args.kind == BlockKind::Group && (args.rows + kWarps - 1) / kWarps > 65535)
    throw Error("quantize_blocks: " + shape() + " has more 8-row blocks than one launch covers (65535); split it");
  if (args.kind == BlockKind::Row && args.rows > int64_t{0x7FFFFFFF})
    throw Error("quantize_blocks: " + shape() + " has more rows than one launch covers; split it");
  const int64_t block_cols = args.kind == BlockKind::Row ? args.cols : args.kind == BlockKind::Group ? args.group : kTile;
  const size_t vec = args.x_type == DType::F32 ? 4 : 8;  // kVec
  const Params p{args.x,
                 args.rows,
                 args.cols,
                 fp8_max(args.format),
                 args.options.margin,
                 args.options.power_of_two,
                 args.q,
                 args.q_t,
                 args.scale_inv,
                 args.amax,
                 (args.cols + block_cols - 1) / block_cols,
                 args.cols % vec == 0 && aligned(args.x, 16),
                 args.cols % vec == 0 && aligned(args.q, vec),
                 args.rows % 16 == 0 && aligned(args.q_t, 16)};
  const bool e4m3 = args.format == Fp8Format::E4M3;
  if (args.x_type == DType::F32) {
    e4m3 ? launch<float, Fp8Format::E4M3>(p, args.kind, args.group, stream)
         : launch<float, Fp8Format::E5M2>(p, args.kind, args.group, stream);
  } else {
    e4m3 ? launch<uint16_t, Fp8Format::E4M3>(p, args.kind, args.group, stream)
         : launch<uint16_t, Fp8Format::E5M2>(p, args.kind, args.group, stream);
  }
  check_launch("quantize_blocks");
}

void dequantize_blocks(const uint8_t* q, int64_t rows, int64_t cols, Fp8Format format, int64_t block_rows,
                       int64_t block_cols, const float* scale_inv, float* out, cudaStream_t stream) {
  if (block_rows <= 0 || block_cols <= 0) throw Error("dequantize_blocks: blocks must be at least 1 x 1");
  if (rows <= 0 || cols <= 0) return;
  const int64_t grid_cols = (cols + block_cols - 1) / block_cols;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((rows * cols + kThreads - 1) / kThreads, 65536));
  if (format == Fp8Format::E4M3) {
    dequantize_kernel<Fp8Format::E4M3><<<blocks, kThreads, 0, stream>>>(q, rows, cols, block_rows, block_cols, grid_cols, scale_inv, out);
  } else {
    dequantize_kernel<Fp8Format::E5M2><<<blocks, kThreads, 0, stream>>>(q, rows, cols, block_rows, block_cols, grid_cols, scale_inv, out);
  }
  check_launch("dequantize_blocks");
}

}  // namespace fp8kit::cuda
