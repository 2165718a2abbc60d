// The KV cache's kernels. kv_append: a thread per 8 RoPE pairs of a head (16-byte loads of both
// halves), rotated by ops/rope_pair.h and cast by fp8_cast.cuh: ops/cpu/kv_cache.cpp's bits.
// decode_attention (flash decoding): a block per (sequence, group of query heads sharing a KV head,
// chunk of keys) reads each key and value row of its chunk once, writes the chunk's scores to shared
// memory, takes their max and exponentials, sums p * v, and leaves the unnormalised output with (max,
// sum) in the workspace; a combine kernel rescales the chunks of each (sequence, head) and divides.
// bf16 caches on CUDA cores (up to 4 heads a block), E4M3 caches on tensor cores (f16 MMAs, up to 8
// heads a block). The grid depends on the batch and the cache's shape only: blocks whose chunk
// starts past the sequence's length return at once, so a captured graph replays for any lengths.
#include "ops/cuda/kv_cache.h"

#include <cuda_fp8.h>

#include <string>

#include "base/error.h"
#include "ops/cuda/activation_out.cuh"
#include "ops/cuda/fp8_cast.cuh"
#include "ops/cuda/mma.cuh"
#include "ops/cuda/round.cuh"
#include "ops/rope_pair.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/dependent_launch.cuh"
#include "runtime/cuda/device_info.h"

namespace fp8kit::cuda {
namespace {

constexpr int kAppendThreads = 256;
constexpr int kDecodeThreads = 128;  // 4 warps
constexpr int kWarps = kDecodeThreads / 32;
constexpr int kMaxChunk = 256;  // keys per block at most (the scores in shared memory)
constexpr int kMinChunk = 32;
constexpr int kMaxCombine = 1024;  // chunks one combine handles (capacity / chunk)
constexpr int kUnroll = 4;  // 16-byte loads per pass per thread (bf16: two passes in flight)

// 8 bf16 values (16 bytes) as floats; those at p (16-byte aligned); floats to 8 bf16 values at p
// (round to nearest even).
__device__ __forceinline__ void bf16x8_to_float(uint4 raw, float* v) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(words[i] << 16);
    v[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
  }
}
__device__ __forceinline__ void load_bf16x8(const uint16_t* p, float* v) {
  bf16x8_to_float(*reinterpret_cast<const uint4*>(p), v);
}
__device__ __forceinline__ void store_bf16x8(const float* v, uint16_t* p) {
  uint32_t words[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    words[i] = static_cast<uint32_t>(float_to_bf16(v[2 * i])) | (static_cast<uint32_t>(float_to_bf16(v[2 * i + 1])) << 16);
  }
  *reinterpret_cast<uint4*>(p) = make_uint4(words[0], words[1], words[2], words[3]);
}

// 8 values (bf16-exact floats) of a cache row at element `at`: bf16, or with scales E4M3 codes of
// value * (1 / scale) (numerics' saturating cast); out (null: none) gets the bf16 of what the row holds.
__device__ __forceinline__ void store_piece(const float* v, void* cache, int64_t at, const float* scales, int64_t head,
                                            uint16_t* out) {
  if (scales == nullptr) {
    store_bf16x8(v, static_cast<uint16_t*>(cache) + at);
    if (out != nullptr) store_bf16x8(v, out);
    return;
  }
  const float scale = scales[head], inverse = __fdiv_rn(1.0f, scale);
  const uint32_t lo = encode_row<Fp8Format::E4M3, false>(v, inverse);
  const uint32_t hi = encode_row<Fp8Format::E4M3, false>(v + 4, inverse);
  *reinterpret_cast<uint2*>(static_cast<uint8_t*>(cache) + at) = make_uint2(lo, hi);
  if (out != nullptr) {
    float held[8];
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const uint8_t code = static_cast<uint8_t>((i < 4 ? lo : hi) >> (8 * (i % 4)));
      held[i] = __fmul_rn(decode_fp8<Fp8Format::E4M3>(code), scale);
    }
    store_bf16x8(held, out);
  }
}

// Thread t: row r, head h of the qkv row's heads + 2 kv_heads, elements [i, i + 8) and their RoPE
// partners [half + i, half + i + 8).
__global__ void append_kernel(KvShape s, int64_t rows, const float* table, const uint16_t* qkv,
                              const int32_t* positions, const int32_t* slots, KvData cache, uint16_t* q_out,
                              uint16_t* k_out, uint16_t* v_out) {
  wait_for_prior_grids();
  allow_dependent_launch();
  const int64_t d = s.head_dim, half = d / 2, pieces = d / 16, all_heads = s.heads + 2 * s.kv_heads;
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= rows * all_heads * pieces) return;
  const int64_t i = (t % pieces) * 8, h = (t / pieces) % all_heads, r = t / (pieces * all_heads);
  const int64_t position = positions[r];
  const uint16_t* x = qkv + (r * all_heads + h) * d;
  float lo[8], hi[8];
  load_bf16x8(x + i, lo);
  load_bf16x8(x + half + i, hi);
  if (h < s.heads + s.kv_heads) {  // q and k are rotated, v is not
    const float4* angles = reinterpret_cast<const float4*>(table + (position * half + i) * 2);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const float4 a = angles[j];  // (cos, sin) of pairs i + 2j and i + 2j + 1
      const ops::RopePair y0 = ops::rope_rotate_pair(lo[2 * j], hi[2 * j], a.x, a.y);
      const ops::RopePair y1 = ops::rope_rotate_pair(lo[2 * j + 1], hi[2 * j + 1], a.z, a.w);
      lo[2 * j] = round_bf16(y0.lo);
      hi[2 * j] = round_bf16(y0.hi);
      lo[2 * j + 1] = round_bf16(y1.lo);
      hi[2 * j + 1] = round_bf16(y1.hi);
    }
  }
  if (h < s.heads) {
    uint16_t* q = q_out + (r * s.heads + h) * d;
    store_bf16x8(lo, q + i);
    store_bf16x8(hi, q + half + i);
    return;
  }
  const bool is_k = h < s.heads + s.kv_heads;
  const int64_t kh = h - s.heads - (is_k ? 0 : s.kv_heads), kv_width = s.kv_heads * d;
  const int64_t at = (static_cast<int64_t>(slots[r]) * s.capacity + position) * kv_width + kh * d;
  uint16_t* out = is_k ? k_out : v_out;
  if (out != nullptr) out += r * kv_width + kh * d;
  void* store = is_k ? cache.k : cache.v;
  const float* scales = is_k ? cache.k_scale : cache.v_scale;
  store_piece(lo, store, at + i, scales, kh, out == nullptr ? nullptr : out + i);
  store_piece(hi, store, at + half + i, scales, kh, out == nullptr ? nullptr : out + half + i);
}

struct DecodeArgs {
  KvShape s;
  const uint16_t* q;
  KvConstData cache;
  const int32_t* slots;
  const int32_t* lengths;
  float scale;
  int heads_per_block;  // query heads a block serves (of one KV head's group)
  int chunk;            // keys per block
  int64_t chunks;       // blocks per (sequence, head): ceil(capacity / chunk)
  float* partial_out;   // [batch, heads, chunks, D]: sum over the chunk of exp(score - max) * v
  float2* partial_stats;  // [batch, heads, chunks]: (max, sum of exp(score - max))
};

// What a block of decode_*_kernel works on: sequence b's chunk of n keys (n <= 0: none), query heads
// h0 .. h0 + heads_per_block - 1 of KV head kh, whose rows start at k, v.
template <int D, typename T>
struct ChunkOf {
  int64_t b, kh, h0;
  int n;
  const T* k;
  const T* v;

  __device__ explicit ChunkOf(const DecodeArgs& a) {
    const int64_t group = a.s.heads / a.s.kv_heads, blocks = group / a.heads_per_block, chunk = blockIdx.x;
    b = blockIdx.z;
    kh = blockIdx.y / blocks;
    h0 = kh * group + (blockIdx.y % blocks) * a.heads_per_block;
    const int64_t length = min(static_cast<int64_t>(a.lengths[b]), a.s.capacity), first = chunk * a.chunk;
    n = static_cast<int>(min(static_cast<int64_t>(a.chunk), length - first));
    const int64_t row0 = (static_cast<int64_t>(a.slots[b]) * a.s.capacity + first) * a.s.kv_heads * D + kh * D;
    k = static_cast<const T*>(a.cache.k) + row0;
    v = static_cast<const T*>(a.cache.v) + row0;
  }
};

// Softmax statistics of the chunk's scores[head][0..n) for heads [0, heads), a warp per head: the scores
// become exp(score - max), and stats[head] = (max, their sum).
template <int Rows>
__device__ __forceinline__ void softmax_rows(float (&scores)[Rows][kMaxChunk], float (&stats)[Rows][2], int heads,
                                             int n) {
  const int lane = threadIdx.x % 32;
  for (int h = threadIdx.x / 32; h < heads; h += kWarps) {
    float max = -INFINITY;
    for (int j = lane; j < n; j += 32) max = fmaxf(max, scores[h][j]);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) max = fmaxf(max, __shfl_xor_sync(0xffffffffu, max, offset));
    float total = 0.0f;
    for (int j = lane; j < n; j += 32) {
      const float p = expf(scores[h][j] - max);
      scores[h][j] = p;
      total += p;
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) total += __shfl_xor_sync(0xffffffffu, total, offset);
    if (lane == 0) {
      stats[h][0] = max;
      stats[h][1] = total;
    }
  }
}

// The block's result for heads [0, heads): the warps' sums[warp][head][e] added, times v_factor, with
// the head's statistics, into the workspace (after a barrier that published sums and stats).
template <int D, int Rows>
__device__ __forceinline__ void write_partials(const DecodeArgs& a, int64_t b, int64_t h0,
                                               const float (&sums)[kWarps][Rows][D], const float (&stats)[Rows][2],
                                               int heads, float v_factor) {
  for (int i = threadIdx.x; i < heads * D; i += kDecodeThreads) {
    const int g = i / D, e = i % D;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += sums[w][g][e];
    const int64_t partial = (b * a.s.heads + h0 + g) * a.chunks + blockIdx.x;
    a.partial_out[partial * D + e] = sum * v_factor;
    if (e == 0) a.partial_stats[partial] = make_float2(stats[g][0], stats[g][1]);
  }
}

// Block (chunk, head group, sequence) over a bf16 cache, G query heads, on CUDA cores: each key row
// split over TK threads of 8 values (16-byte loads), two passes of loads in flight.
template <int D, int G>
__global__ void __launch_bounds__(kDecodeThreads, 4) decode_bf16_kernel(DecodeArgs a) {
  wait_for_prior_grids();
  allow_dependent_launch();
  constexpr int E = 8;            // elements per 16-byte load
  constexpr int U = kUnroll;
  constexpr int TK = D / E;                // threads per key row
  constexpr int KP = kDecodeThreads / TK;  // keys per pass of the block
  static_assert(TK <= 32 && 32 % TK == 0, "a key row's threads must sit in one warp");
  const ChunkOf<D, uint16_t> c(a);
  const int n = c.n;
  if (n <= 0) return;
  const int tid = threadIdx.x, slice = tid % TK, key_group = tid / TK, lane = tid % 32, warp = tid / 32;
  const int64_t kv_width = a.s.kv_heads * D;
  const uint16_t* k = c.k + slice * E;
  const uint16_t* v = c.v + slice * E;

  __shared__ float scores[G][kMaxChunk];
  __shared__ float stats[G][2];
  __shared__ float sums[kWarps][G][D];

  // Scores: each key's dot products over its TK threads' slices, summed across them by shuffles.
  {
    float query[G][E];
#pragma unroll
    for (int g = 0; g < G; ++g) load_bf16x8(a.q + (c.b * a.s.heads + c.h0 + g) * D + slice * E, query[g]);
    // Two passes of keys in flight: this one's, being summed, and the next one's, loading.
    uint4 next[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = u * KP + key_group;
      next[u] = j < n ? __ldg(reinterpret_cast<const uint4*>(k + j * kv_width)) : make_uint4(0, 0, 0, 0);
    }
    for (int base = 0; base < n; base += KP * U) {  // the same trip count in every thread
      uint4 raw[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        raw[u] = next[u];
        const int j = base + KP * U + u * KP + key_group;
        next[u] = j < n ? __ldg(reinterpret_cast<const uint4*>(k + j * kv_width)) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        float key[E];
        bf16x8_to_float(raw[u], key);
        float dot[G];
#pragma unroll
        for (int g = 0; g < G; ++g) {
          float sum = 0.0f;
#pragma unroll
          for (int e = 0; e < E; ++e) sum = fmaf(query[g][e], key[e], sum);
          dot[g] = sum;
        }
#pragma unroll
        for (int offset = TK / 2; offset > 0; offset /= 2) {
#pragma unroll
          for (int g = 0; g < G; ++g) dot[g] += __shfl_xor_sync(0xffffffffu, dot[g], offset);
        }
        const int j = base + u * KP + key_group;
        if (slice == 0 && j < n) {
#pragma unroll
          for (int g = 0; g < G; ++g) scores[g][j] = dot[g] * a.scale;
        }
      }
    }
  }
  // The values' first loads go out now, to arrive while the softmax runs.
  uint4 next[U];  // (as for the keys: the next pass's loads in flight)
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int j = u * KP + key_group;
    next[u] = j < n ? __ldg(reinterpret_cast<const uint4*>(v + j * kv_width)) : make_uint4(0, 0, 0, 0);
  }
  __syncthreads();
  softmax_rows(scores, stats, G, n);
  __syncthreads();
  // Values: each thread sums p * v over its keys for its slice, then the key groups are summed (the
  // warp's by shuffles, then the warps' through shared memory).
  float acc[G][E];
#pragma unroll
  for (int g = 0; g < G; ++g) {
#pragma unroll
    for (int e = 0; e < E; ++e) acc[g][e] = 0.0f;
  }
  for (int base = 0; base < n; base += KP * U) {
    uint4 raw[U];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      raw[u] = next[u];
      const int j = base + KP * U + u * KP + key_group;  // the next pass's, in flight during this one
      next[u] = j < n ? __ldg(reinterpret_cast<const uint4*>(v + j * kv_width)) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int j = base + u * KP + key_group;
      if (j >= n) continue;
      float value[E];
      bf16x8_to_float(raw[u], value);
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float p = scores[g][j];
#pragma unroll
        for (int e = 0; e < E; ++e) acc[g][e] = fmaf(p, value[e], acc[g][e]);
      }
    }
  }
#pragma unroll
  for (int offset = TK; offset < 32; offset *= 2) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][e] += __shfl_xor_sync(0xffffffffu, acc[g][e], offset);
    }
  }
  if (lane < TK) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
#pragma unroll
      for (int e = 0; e < E; ++e) sums[warp][g][slice * E + e] = acc[g][e];
    }
  }
  __syncthreads();
  write_partials(a, c.b, c.h0, sums, stats, G, 1.0f);
}

// --- E4M3 caches, on tensor cores ----------------------------------------------------------------
// On CUDA cores an E4M3 thread holds 16 decoded values per load times its query heads in registers,
// which left room for half of bf16's loads in flight (63% of the copy bandwidth at batch 64 against
// bf16's 92%). MMA fragments hold the sums instead, and a thread keeps a whole tile's keys in flight.

constexpr int kMmaHeads = 8;   // query heads per E4M3 block at most: the MMA's n
constexpr int kTileKeys = 16;  // keys per MMA tile (the scores' m, the sums' k)
constexpr int kTilesPerWarp = kMaxChunk / kTileKeys / kWarps;

__device__ __forceinline__ uint32_t e4m3_pair(uint32_t codes) { return fp8x2_to_f16x2<__NV_E4M3>(codes); }

// Bytes bytes (8 or a multiple of 16) of codes at p as words, zeros unless valid.
template <int Bytes>
__device__ __forceinline__ void load_codes(const uint8_t* p, bool valid, uint32_t (&w)[Bytes / 4]) {
  if constexpr (Bytes == 8) {
    const uint2 x = valid ? __ldg(reinterpret_cast<const uint2*>(p)) : make_uint2(0, 0);
    w[0] = x.x, w[1] = x.y;
  } else {
#pragma unroll
    for (int i = 0; i < Bytes / 16; ++i) {
      const uint4 x = valid ? __ldg(reinterpret_cast<const uint4*>(p) + i) : make_uint4(0, 0, 0, 0);
      w[4 * i] = x.x, w[4 * i + 1] = x.y, w[4 * i + 2] = x.z, w[4 * i + 3] = x.w;
    }
  }
}

// Block (chunk, head group, sequence) over an E4M3 cache; its heads_per_block <= 8 query heads are
// the MMAs' n (the rest zeros). Warp w takes the chunk's 16-key tiles w, w + 4, ... Thread
// (g = lane / 4, t = lane % 4) of a tile:
// - scores, S^T[key, head] = K . Q^T: it loads bytes [t D/4, (t + 1) D/4) of keys g and g + 8, and
//   k-step s takes their 4-byte word s as its a-fragment's columns 2t, 2t + 1, 2t + 8, 2t + 9, with q of
//   head g at the same dims as its b-fragment (a dot product needs q's and k's dims in the same order,
//   not in the order of the row);
// - sums, O^T[dim, head] = V^T . P^T: it loads bytes [g D/8, (g + 1) D/8) of keys 2t, 2t + 1, 2t + 8
//   and 2t + 9, pairs each dim's codes of consecutive keys (a byte permute), and m-tile i takes dims
//   g D/8 + 2i and + 1 as its rows g and g + 8.
// q enters as f16 times a power of two (exact down to 2^-25 of the block's largest |q|), each
// probability times 2^15 as the sum of two f16s (22 bits or more for p >= 2^-17, absolute error below
// 2^-40 under that), summed in float32 on the tensor cores.
template <int D>
__global__ void __launch_bounds__(kDecodeThreads, 4) decode_e4m3_kernel(DecodeArgs a) {
  wait_for_prior_grids();
  allow_dependent_launch();
  constexpr int kScoreBytes = D / 4, kSumBytes = D / 8, kSteps = D / 16;
  const ChunkOf<D, uint8_t> c(a);
  const int n = c.n, heads = a.heads_per_block;
  if (n <= 0) return;
  const int tid = threadIdx.x, warp = tid / 32, g = (tid % 32) / 4, t = tid % 4;
  const int64_t kv_width = a.s.kv_heads * D;

  __shared__ float probs[kMmaHeads][kMaxChunk];
  __shared__ float stats[kMmaHeads][2];
  __shared__ float sums[kWarps][kMmaHeads][D];

  // The keys' loads first: a tile's two rows per thread, every tile of the warp in flight at once.
  uint32_t keys[kTilesPerWarp][2][kScoreBytes / 4];
#pragma unroll
  for (int i = 0; i < kTilesPerWarp; ++i) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int j = (warp + kWarps * i) * kTileKeys + g + 8 * r;
      load_codes<kScoreBytes>(c.k + j * kv_width + t * kScoreBytes, j < n, keys[i][r]);
    }
  }
  // q of head g at this thread's dims, as f16 pairs times 2^shift: the block's largest |q| (every warp
  // finds the same) just under 2^15, far from f16's overflow and underflow.
  uint32_t query[kScoreBytes / 2];
  float down, factor;  // a score is (s * down) * factor
  {
    float q[kScoreBytes];
#pragma unroll
    for (int i = 0; i < kScoreBytes / 8; ++i) {
      if (g < heads) {
        load_bf16x8(a.q + (c.b * a.s.heads + c.h0 + g) * D + t * kScoreBytes + 8 * i, q + 8 * i);
      } else {
#pragma unroll
        for (int e = 0; e < 8; ++e) q[8 * i + e] = 0.0f;
      }
    }
    float largest = 0.0f;
#pragma unroll
    for (int e = 0; e < kScoreBytes; ++e) largest = fmaxf(largest, fabsf(q[e]));
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2)
      largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, offset));
    int exponent = 0;  // largest < 2^exponent
    if (largest > 0.0f && isfinite(largest)) frexpf(largest, &exponent);
    const int shift = min(max(15 - exponent, -113), 113);  // (2^shift and 2^-shift normal floats)
    const float up = __int_as_float((127 + shift) << 23);
    down = __int_as_float((127 - shift) << 23);
#pragma unroll
    for (int p = 0; p < kScoreBytes / 2; ++p) query[p] = f16x2(q[2 * p] * up, q[2 * p + 1] * up);
    factor = a.scale * a.cache.k_scale[c.kh];
  }
  // Scores: S^T of each tile (keys g, g + 8 by heads 2t, 2t + 1 in this thread's fragment).
#pragma unroll
  for (int i = 0; i < kTilesPerWarp; ++i) {
    const int tile = (warp + kWarps * i) * kTileKeys;
    if (tile >= n) break;
    float s[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
    for (int step = 0; step < kSteps; ++step) {
      const uint32_t frag[4] = {e4m3_pair(keys[i][0][step]), e4m3_pair(keys[i][1][step]),
                                e4m3_pair(keys[i][0][step] >> 16), e4m3_pair(keys[i][1][step] >> 16)};
      mma_f16(s, frag, query[2 * step], query[2 * step + 1]);
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) {
#pragma unroll
      for (int col = 0; col < 2; ++col) {
        const int j = tile + g + 8 * r, head = 2 * t + col;
        if (head < heads && j < n) probs[head][j] = (s[2 * r + col] * down) * factor;
      }
    }
  }
  // The values' loads go out now, to arrive while the softmax runs: keys 2t, 2t + 1, 2t + 8, 2t + 9 of
  // each tile.
  uint32_t values[kTilesPerWarp][4][kSumBytes / 4];
#pragma unroll
  for (int i = 0; i < kTilesPerWarp; ++i) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const int j = (warp + kWarps * i) * kTileKeys + 2 * t + (r & 1) + 8 * (r >> 1);
      load_codes<kSumBytes>(c.v + j * kv_width + g * kSumBytes, j < n, values[i][r]);
    }
  }
  __syncthreads();
  softmax_rows(probs, stats, heads, n);
  __syncthreads();
  // Sums: O^T of the tiles (dims g D/8 + 2m and + 1 by heads 2t, 2t + 1 in o[m]).
  float o[kSteps][4];
#pragma unroll
  for (int m = 0; m < kSteps; ++m) o[m][0] = o[m][1] = o[m][2] = o[m][3] = 0.0f;
#pragma unroll
  for (int i = 0; i < kTilesPerWarp; ++i) {
    const int tile = (warp + kWarps * i) * kTileKeys;
    if (tile >= n) break;
    // p * 2^15 of head g at keys 2t, 2t + 1 and 2t + 8, 2t + 9 (scaled so that both halves stay normal
    // f16s down to p = 2^-17; the sums are scaled back with v's factor).
    uint32_t high[2] = {0, 0}, low[2] = {0, 0};
    if (g < heads) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const int j = tile + 2 * t + 8 * r;
        const float p0 = j < n ? probs[g][j] * 0x1p15f : 0.0f;
        const float p1 = j + 1 < n ? probs[g][j + 1] * 0x1p15f : 0.0f;
        const float2 held = __half22float2(__floats2half2_rn(p0, p1));
        high[r] = f16x2(p0, p1);
        low[r] = f16x2(p0 - held.x, p1 - held.y);  // (the differences are exact in float32)
      }
    }
#pragma unroll
    for (int m = 0; m < kSteps; ++m) {
      // Bytes 2m, 2m + 1 of the rows of keys 2t and 2t + 1 (and 2t + 8, 2t + 9) as pairs of keys.
      const int word = m / 2;
      const uint32_t select = m % 2 == 0 ? 0x5140u : 0x7362u;
      const uint32_t near = __byte_perm(values[i][0][word], values[i][1][word], select);
      const uint32_t far = __byte_perm(values[i][2][word], values[i][3][word], select);
      const uint32_t frag[4] = {e4m3_pair(near), e4m3_pair(near >> 16), e4m3_pair(far), e4m3_pair(far >> 16)};
      mma_f16(o[m], frag, high[0], high[1]);
      mma_f16(o[m], frag, low[0], low[1]);
    }
  }
#pragma unroll
  for (int m = 0; m < kSteps; ++m) {
#pragma unroll
    for (int col = 0; col < 2; ++col) {
      const int head = 2 * t + col;
      if (head >= heads) continue;
      sums[warp][head][g * kSumBytes + 2 * m] = o[m][col];
      sums[warp][head][g * kSumBytes + 2 * m + 1] = o[m][2 + col];
    }
  }
  __syncthreads();
  write_partials(a, c.b, c.h0, sums, stats, heads, a.cache.v_scale[c.kh] * 0x1p-15f);
}

// Block per (sequence, head), a thread per output element: the chunks' partial sums rescaled to their
// common max, divided by the rescaled total. The chunks' statistics are read by all threads at once
// and their weights kept in shared memory (a chunk's weight is every thread's), so the only serial
// loop left is each thread's sum over independent loads. The result goes out as bf16, or as E4M3 codes
// of the bf16 value at a per-tensor scale (ops::quantize's bytes; its amax raised when recorded).
template <int D>
__global__ void __launch_bounds__(D) combine_kernel(DecodeArgs a, ActivationOutArgs out) {
  wait_for_prior_grids();
  allow_dependent_launch();
  constexpr int kWarpsHere = D / 32;
  __shared__ float weights[kMaxCombine];
  __shared__ float reduce[kWarpsHere];
  const int64_t bh = blockIdx.x, b = bh / a.s.heads;
  const int e = threadIdx.x, lane = e % 32, warp = e / 32;
  const int64_t length = min(static_cast<int64_t>(a.lengths[b]), a.s.capacity);
  const int used = static_cast<int>(min((length + a.chunk - 1) / a.chunk, a.chunks));  // <= kMaxCombine
  const float2* stats = a.partial_stats + bh * a.chunks;
  const float* partial = a.partial_out + bh * a.chunks * D + e;
  auto block_reduce = [&](float v, bool is_max) {
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) {
      const float o = __shfl_xor_sync(0xffffffffu, v, offset);
      v = is_max ? fmaxf(v, o) : v + o;
    }
    if (lane == 0) reduce[warp] = v;
    __syncthreads();
    v = reduce[0];
#pragma unroll
    for (int w = 1; w < kWarpsHere; ++w) v = is_max ? fmaxf(v, reduce[w]) : v + reduce[w];
    __syncthreads();
    return v;
  };
  float max = -INFINITY;
  for (int c = e; c < used; c += D) max = fmaxf(max, stats[c].x);
  max = block_reduce(max, true);
  float denominator = 0.0f;
  for (int c = e; c < used; c += D) {
    const float2 st = stats[c];
    const float w = expf(st.x - max);
    weights[c] = w;
    denominator = fmaf(w, st.y, denominator);
  }
  denominator = block_reduce(denominator, false);  // (its barrier also publishes the weights)
  float numerator[4] = {0.0f, 0.0f, 0.0f, 0.0f};  // four independent sums: loads in flight
  int c = 0;
  for (; c + 4 <= used; c += 4) {
#pragma unroll
    for (int i = 0; i < 4; ++i) numerator[i] = fmaf(weights[c + i], partial[(c + i) * D], numerator[i]);
  }
  for (; c < used; ++c) numerator[0] = fmaf(weights[c], partial[c * D], numerator[0]);
  const Bf16s<1> y{{float_to_bf16(((numerator[0] + numerator[1]) + (numerator[2] + numerator[3])) / denominator)}};
  // The row kernels' output path: bf16 as it is, or the codes at the per-tensor scale with its
  // scale_inv (row 0's first thread) and the block's amax raised when recorded.
  const float scale = activation_scale<1>(out, RowThread{bh, e, D}, raise_amax(0u, y), tensor_scale(out));
  store_activation<1>(out, bh * D + e, y, scale);
}

// Query heads per block: bf16, the largest of 4, 2, 1 that divides the group (query heads per KV
// head); E4M3, the largest divisor of the group up to the MMA's 8.
int heads_per_block(const KvShape& s, bool fp8) {
  const int64_t group = s.heads / s.kv_heads;
  if (!fp8) return group % 4 == 0 ? 4 : group % 2 == 0 ? 2 : 1;
  int g = kMmaHeads;
  while (group % g != 0) --g;
  return g;
}

// Keys per block: 256, halved (down to 32) while the grid would have fewer than two blocks per SM, so
// that a small batch still spreads over the GPU.
int chunk_for(const KvShape& s, int64_t batch, bool fp8) {
  const int sms = current_device_attribute(cudaDevAttrMultiProcessorCount);
  const int64_t blocks_per_chunk = batch * s.heads / heads_per_block(s, fp8);
  int chunk = kMaxChunk;
  while (chunk > kMinChunk && blocks_per_chunk * ((s.capacity + chunk - 1) / chunk) < 2 * sms &&
         (s.capacity + chunk / 2 - 1) / (chunk / 2) <= kMaxCombine)
    chunk /= 2;
  if ((s.capacity + chunk - 1) / chunk > kMaxCombine)
    throw Error("decode_attention: a cache of " + std::to_string(s.capacity) + " positions is longer than the GPU "
                "kernel's " + std::to_string(kMaxChunk * kMaxCombine));
  return chunk;
}

template <int D>
void launch_decode(const DecodeArgs& a, int64_t batch, bool fp8, const ActivationOutArgs& out, cudaStream_t stream) {
  const int64_t head_groups = a.s.kv_heads * (a.s.heads / a.s.kv_heads / a.heads_per_block);
  if (a.chunks >= (int64_t{1} << 31) || head_groups > 65535 || batch > 65535)
    throw Error("decode_attention: " + std::to_string(batch) + " sequences of " + std::to_string(a.chunks) +
                " chunks and " + std::to_string(head_groups) + " head groups are too many for one launch");
  const dim3 grid(static_cast<unsigned>(a.chunks), static_cast<unsigned>(head_groups), static_cast<unsigned>(batch));
  const dim3 threads(kDecodeThreads);
  if (fp8) {
    launch_dependent(decode_e4m3_kernel<D>, grid, threads, 0, stream, 1, a);
  } else if (a.heads_per_block == 4) {
    launch_dependent(decode_bf16_kernel<D, 4>, grid, threads, 0, stream, 1, a);
  } else if (a.heads_per_block == 2) {
    launch_dependent(decode_bf16_kernel<D, 2>, grid, threads, 0, stream, 1, a);
  } else {
    launch_dependent(decode_bf16_kernel<D, 1>, grid, threads, 0, stream, 1, a);
  }
  check_launch("decode_attention");
  launch_dependent(combine_kernel<D>, dim3(static_cast<unsigned>(batch * a.s.heads)), dim3(D), 0, stream, 1, a, out);
  check_launch("decode_attention_combine");
}

}  // namespace

void kv_append(const KvShape& s, int64_t rows, const float* table, const uint16_t* qkv, const int32_t* positions,
               const int32_t* slots, const KvData& cache, uint16_t* q_out, uint16_t* k_out, uint16_t* v_out,
               cudaStream_t stream) {
  const int64_t threads = rows * (s.heads + 2 * s.kv_heads) * (s.head_dim / 16);
  if (threads == 0) return;
  if (threads >= (int64_t{1} << 31) * kAppendThreads)
    throw Error("kv_append: " + std::to_string(rows) + " rows are too many for one launch");
  launch_dependent(append_kernel, dim3(blocks_for(threads, kAppendThreads)), dim3(kAppendThreads), 0, stream, 1, s, rows,
                   table, qkv, positions, slots, cache, q_out, k_out, v_out);
  check_launch("kv_append");
}

size_t decode_attention_workspace(const KvShape& s, int64_t batch, bool fp8) {
  const int64_t chunk = chunk_for(s, batch, fp8), chunks = (s.capacity + chunk - 1) / chunk;
  return static_cast<size_t>(batch * s.heads * chunks) * (s.head_dim * sizeof(float) + sizeof(float2));
}

void decode_attention(const KvShape& s, int64_t batch, const uint16_t* q, const KvConstData& cache, const int32_t* slots,
                      const int32_t* lengths, float scale, const ActivationOutArgs& out, void* workspace,
                      cudaStream_t stream) {
  if (batch == 0) return finish_empty_activation(out, stream);
  const bool fp8 = cache.k_scale != nullptr;
  const int chunk = chunk_for(s, batch, fp8);
  const int64_t chunks = (s.capacity + chunk - 1) / chunk;
  auto* partial_out = static_cast<float*>(workspace);
  // After the [batch, heads, chunks, D] floats: 8-byte aligned, as D is even.
  auto* partial_stats = reinterpret_cast<float2*>(partial_out + batch * s.heads * chunks * s.head_dim);
  const DecodeArgs a{s, q, cache, slots, lengths, scale, heads_per_block(s, fp8), chunk, chunks, partial_out,
                     partial_stats};
  if (s.head_dim == 64) {
    launch_decode<64>(a, batch, fp8, out, stream);
  } else if (s.head_dim == 128) {
    launch_decode<128>(a, batch, fp8, out, stream);
  } else {
    throw Error("decode_attention: the GPU kernel takes head_dim 64 or 128, got " + std::to_string(s.head_dim));
  }
}

}  // namespace fp8kit::cuda
