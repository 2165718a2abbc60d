// Block-scaled FP8 quantization kernels (block_quantize.h), each one read of x from DRAM:
//
// Group (1 x G, G = 32, 64, 128): a block of 256 threads per 8 rows x 512 columns, a warp per row
// (lane l: columns 4l .. 4l + 3 of each chunk of 128, one 16-byte load of fp32 or 8 of bf16, the 4
// chunks' loads in flight before the first is used). The G / 4 lanes of a group reduce its amax with
// xor shuffles and cast it from registers; then the row segment's amaxes and scales are gathered into
// the first lanes, one contiguous store per array. (Stored by each group's first lane, 4-byte writes
// scattered across blocks, they held 1 x 32 at 84% of the copy's bandwidth; gathered, 91-93%.)

// Row (1 x cols): a block of 256 threads per row (thread t: columns 4t .. 4t + 3 of each 1024), the
// first 8 chunks of 1024 held in registers while the block reduces the row's amax, so rows of up to
// 8192 columns are read once; longer rows re-read the rest for the cast.
//
// Tile128 (128 x 128): a block of 256 threads per tile, warp w rows 16w .. 16w + 15 and lane l
// columns 4l .. 4l + 3 (16 loads in flight per thread); amax by warp, then block; the transposed
// codes go through shared memory as 4 x 4 byte transposes, 128 bytes per transposed row out.
//
// Every block's scale is numerics' current_scale (scale.cuh) and its codes encode_row's, so the
// bytes are those of numerics::quantize_blocks. Elements outside the matrix load as +0: they neither
// raise an amax nor get stored.
#include "ops/cuda/block_quantize.h"

#include <algorithm>
#include <string>
#include <type_traits>

#include "base/error.h"
#include "ops/cuda/aligned.h"
#include "ops/cuda/fp8_cast.cuh"
#include "ops/cuda/scale.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 256, kWarps = kThreads / 32;
constexpr int kGroupChunk = 128;         // columns per block (Group)
constexpr int kGroupChunks = 4;          // chunks of a row per warp (Group)
constexpr int kRowChunk = 4 * kThreads;  // columns per block step (Row)
constexpr int kRowKept = 8;              // chunks of a row held in registers (Row)
constexpr int kTile = 128;               // Tile128's rows and columns
constexpr int kTileStride = kTile / 4 + 1;  // words per transposed row in shared memory (+1: fewer bank conflicts)

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
  bool vector_load;     // every row of x starts 16-byte (fp32) / 8-byte (bf16) aligned
  bool vector_store;    // every row of q starts 4-byte aligned
  bool vector_store_t;  // every row of q_t starts 16-byte aligned
};

// Four consecutive elements of a row as loaded: a float4 of fp32, or a uint2 holding four bf16.
template <typename T>
using Raw = std::conditional_t<sizeof(T) == 4, float4, uint2>;

// x[row, col .. col + 3]; +0 outside the matrix. Streamed (read once, kept out of the caches' way)
// unless Reread (a long row's second pass reads it again).
template <typename T, bool Reread = false>
__device__ __forceinline__ Raw<T> load_raw(const Params& p, int64_t row, int64_t col) {
  Raw<T> raw{};
  if (row >= p.rows || col >= p.cols) return raw;
  const T* src = static_cast<const T*>(p.x) + row * p.cols + col;
  if (p.vector_load && col + 3 < p.cols) {
    const Raw<T>* vector = reinterpret_cast<const Raw<T>*>(src);
    return Reread ? *vector : __ldcs(vector);
  }
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

// max(amax, |v[i]|) as ordered bits (NaN ignored, inf counted).
__device__ __forceinline__ uint32_t raise_amax(uint32_t amax, const float v[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) amax = max(amax, amax_bits(__float_as_uint(v[i])));
  return amax;
}

// Codes w of x[row, col .. col + 3] into q (the parts inside the matrix).
__device__ __forceinline__ void store_codes(const Params& p, int64_t row, int64_t col, uint32_t w) {
  if (row >= p.rows || col >= p.cols) return;
  uint8_t* dst = p.q + row * p.cols + col;
  if (p.vector_store && col + 3 < p.cols) {
    *reinterpret_cast<uint32_t*>(dst) = w;
    return;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
    if (col + i < p.cols) dst[i] = static_cast<uint8_t>(w >> (8 * i));
}

__device__ __forceinline__ void store_block(const Params& p, int64_t block, float amax, float scale) {
  p.scale_inv[block] = __frcp_rn(scale);  // 1 / scale, correctly rounded as the division
  p.amax[block] = amax;
}

template <typename T, Fp8Format F, int G>
__global__ void __launch_bounds__(kThreads) group_kernel(Params p) {
  constexpr int lanes = G / 4;                    // lanes per group
  constexpr int per_chunk = kGroupChunk / G;      // groups per chunk
  constexpr int groups = kGroupChunks * per_chunk;  // groups of the warp's row segment
  const int lane = threadIdx.x % 32;
  const int64_t row = static_cast<int64_t>(blockIdx.y) * kWarps + threadIdx.x / 32;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kGroupChunks * kGroupChunk;  // the segment's first column
  Raw<T> raw[kGroupChunks];
#pragma unroll
  for (int c = 0; c < kGroupChunks; ++c) raw[c] = load_raw<T>(p, row, first + c * kGroupChunk + 4 * lane);
  float amaxes[kGroupChunks], scales[kGroupChunks];
#pragma unroll
  for (int c = 0; c < kGroupChunks; ++c) {
    float v[4];
    to_floats(raw[c], v);
    uint32_t amax = raise_amax(0, v);
#pragma unroll
    for (int offset = lanes / 2; offset > 0; offset /= 2) amax = max(amax, __shfl_xor_sync(0xFFFFFFFFu, amax, offset));
    amaxes[c] = __uint_as_float(amax);
    scales[c] = current_scale(amaxes[c], p.fp8_max, p.margin, p.power_of_two);
    store_codes(p, row, first + c * kGroupChunk + 4 * lane, encode_row<F, false>(v, scales[c]));
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
__device__ __forceinline__ uint32_t block_max(uint32_t amax) {
  __shared__ uint32_t warp_amax[kWarps];
  amax = __reduce_max_sync(0xFFFFFFFFu, amax);
  if (threadIdx.x % 32 == 0) warp_amax[threadIdx.x / 32] = amax;
  __syncthreads();
#pragma unroll
  for (int i = 0; i < kWarps; ++i) amax = max(amax, warp_amax[i]);
  return amax;
}

template <typename T, Fp8Format F>
__global__ void __launch_bounds__(kThreads) row_kernel(Params p) {
  const int64_t row = blockIdx.x;
  const int64_t chunks = (p.cols + kRowChunk - 1) / kRowChunk;
  const int64_t col0 = 4 * threadIdx.x;
  Raw<T> raw[kRowKept];
#pragma unroll
  for (int c = 0; c < kRowKept; ++c) raw[c] = load_raw<T>(p, row, c * kRowChunk + col0);
  uint32_t amax = 0;
  float v[4];
#pragma unroll
  for (int c = 0; c < kRowKept; ++c) {
    to_floats(raw[c], v);
    amax = raise_amax(amax, v);
  }
  for (int64_t c = kRowKept; c < chunks; ++c) {
    to_floats(load_raw<T, true>(p, row, c * kRowChunk + col0), v);
    amax = raise_amax(amax, v);
  }
  amax = block_max(amax);
  const float a = __uint_as_float(amax), scale = current_scale(a, p.fp8_max, p.margin, p.power_of_two);
#pragma unroll
  for (int c = 0; c < kRowKept; ++c) {
    to_floats(raw[c], v);
    store_codes(p, row, c * kRowChunk + col0, encode_row<F, false>(v, scale));
  }
  for (int64_t c = kRowKept; c < chunks; ++c) {
    to_floats(load_raw<T>(p, row, c * kRowChunk + col0), v);
    store_codes(p, row, c * kRowChunk + col0, encode_row<F, false>(v, scale));
  }
  if (threadIdx.x == 0) store_block(p, row, a, scale);
}

template <typename T, Fp8Format F>
__global__ void __launch_bounds__(kThreads) tile_kernel(Params p) {
  constexpr int kRows = kTile / kWarps;  // rows per warp
  __shared__ uint32_t tile_t[kTile * kTileStride];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTile + warp * kRows;
  const int64_t col = static_cast<int64_t>(blockIdx.x) * kTile + 4 * lane;
  Raw<T> raw[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) raw[r] = load_raw<T>(p, row0 + r, col);
  uint32_t amax = 0;
  float v[4];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    to_floats(raw[r], v);
    amax = raise_amax(amax, v);
  }
  amax = block_max(amax);
  const float a = __uint_as_float(amax), scale = current_scale(a, p.fp8_max, p.margin, p.power_of_two);
  uint32_t w[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    to_floats(raw[r], v);
    w[r] = encode_row<F, false>(v, scale);
    store_codes(p, row0 + r, col, w[r]);
  }
  if (threadIdx.x == 0) store_block(p, static_cast<int64_t>(blockIdx.y) * p.grid_cols + blockIdx.x, a, scale);
  if (p.q_t == nullptr) return;  // the same for the whole block

  // Word (c, j) of tile_t: column c of the tile, rows 4j .. 4j + 3 in bytes 0..3.
#pragma unroll
  for (int r4 = 0; r4 < kRows / 4; ++r4) {
    uint32_t columns[4];
    transpose_4x4(w + 4 * r4, columns);
#pragma unroll
    for (int i = 0; i < 4; ++i) tile_t[(4 * lane + i) * kTileStride + (warp * kRows) / 4 + r4] = columns[i];
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
      const dim3 grid(static_cast<unsigned>((p.cols + kGroupChunks * kGroupChunk - 1) / (kGroupChunks * kGroupChunk)),
                      static_cast<unsigned>((p.rows + kWarps - 1) / kWarps));
      if (group == 32) group_kernel<T, F, 32><<<grid, kThreads, 0, stream>>>(p);
      if (group == 64) group_kernel<T, F, 64><<<grid, kThreads, 0, stream>>>(p);
      if (group == 128) group_kernel<T, F, 128><<<grid, kThreads, 0, stream>>>(p);
      return;
    }
    case BlockKind::Row:
      row_kernel<T, F><<<static_cast<unsigned>(p.rows), kThreads, 0, stream>>>(p);
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
  if (args.kind == BlockKind::Row && args.rows > int64_t{0x7FFFFFFF})
    throw Error("quantize_blocks: " + shape() + " has more rows than one launch covers; split it");
  const int64_t block_cols = args.kind == BlockKind::Row ? args.cols : args.kind == BlockKind::Group ? args.group : kTile;
  const size_t element = args.x_type == DType::F32 ? 4 : 2;
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
                 args.cols % 4 == 0 && aligned(args.x, 4 * element),
                 args.cols % 4 == 0 && aligned(args.q, 4),
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
