// The KV cache's kernels. kv_append: a thread per 8 RoPE pairs of a head (16-byte loads of both
// halves), rotated by ops/rope_pair.h and cast by fp8_cast.cuh: ops/cpu/kv_cache.cpp's bits.
// decode_attention (flash decoding): a block per (sequence, group of up to 4 query heads sharing a KV
// head, chunk of keys) reads each key and value row of its chunk once with 16-byte loads (a row split
// over D / elements-per-16-bytes threads), writes the chunk's scores to shared memory, takes their
// max and exponentials, sums p * v, and leaves the unnormalised output with (max, sum) in the
// workspace; a combine kernel rescales the chunks of each (sequence, head) and divides. The grid
// depends on the batch and the cache's shape only: blocks whose chunk starts past the sequence's
// length return at once, so a captured graph replays for any lengths.
#include "ops/cuda/kv_cache.h"

#include <cuda_fp8.h>

#include <string>

#include "base/error.h"
#include "ops/cuda/fp8_cast.cuh"
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
constexpr int kUnroll = 4;  // 16-byte loads per pass per thread (bf16; two passes in flight)

// 8 bf16 values at p (16-byte aligned) as floats, and floats to 8 bf16 values (round to nearest even).
__device__ __forceinline__ void load_bf16x8(const uint16_t* p, float* v) {
  const uint4 raw = *reinterpret_cast<const uint4*>(p);
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(words[i] << 16);
    v[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
  }
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

// 16 bytes of a cache row as floats: 8 bf16 values or 16 E4M3 codes (exact).
template <typename T>
__device__ __forceinline__ void unpack(uint4 raw, float* v);
template <>
__device__ __forceinline__ void unpack<uint16_t>(uint4 raw, float* v) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    v[2 * i] = __uint_as_float(words[i] << 16);
    v[2 * i + 1] = __uint_as_float(words[i] & 0xFFFF0000u);
  }
}
template <>
__device__ __forceinline__ void unpack<uint8_t>(uint4 raw, float* v) {
  const uint32_t words[4] = {raw.x, raw.y, raw.z, raw.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int part = 0; part < 2; ++part) {
      const auto pair = static_cast<__nv_fp8x2_storage_t>(words[i] >> (16 * part));  // low byte -> .x
      const float2 f = __half22float2(__half2(__nv_cvt_fp8x2_to_halfraw2(pair, __NV_E4M3)));
      v[4 * i + 2 * part] = f.x;
      v[4 * i + 2 * part + 1] = f.y;
    }
  }
}

struct DecodeArgs {
  KvShape s;
  const uint16_t* q;
  KvConstData cache;
  const int32_t* slots;
  const int32_t* lengths;
  float scale;
  int chunk;           // keys per block
  int64_t chunks;      // blocks per (sequence, head): ceil(capacity / chunk)
  float* partial_out;  // [batch, heads, chunks, D]: sum over the chunk of exp(score - max) * v
  float2* partial_stats;  // [batch, heads, chunks]: (max, sum of exp(score - max))
};

// Block (chunk, head group, sequence). T: uint16_t (bf16) or uint8_t (E4M3) cache; G query heads.
template <int D, typename T, int G>
__global__ void __launch_bounds__(kDecodeThreads, 4) decode_chunk_kernel(DecodeArgs a) {
  wait_for_prior_grids();
  allow_dependent_launch();
  constexpr int E = 16 / static_cast<int>(sizeof(T));  // elements per 16-byte load
  constexpr int U = sizeof(T) == 2 ? kUnroll : kUnroll / 2;  // E4M3: its registers hold twice the values
  constexpr int TK = D / E;                            // threads per key row
  constexpr int KP = kDecodeThreads / TK;              // keys per pass of the block
  static_assert(TK <= 32 && 32 % TK == 0, "a key row's threads must sit in one warp");
  const int64_t b = blockIdx.z, chunk = blockIdx.x, group = a.s.heads / a.s.kv_heads;
  const int64_t kh = blockIdx.y / (group / G), h0 = kh * group + (blockIdx.y % (group / G)) * G;
  const int64_t length = min(static_cast<int64_t>(a.lengths[b]), a.s.capacity), first = chunk * a.chunk;
  if (first >= length) return;
  const int n = static_cast<int>(min(static_cast<int64_t>(a.chunk), length - first));
  const int tid = threadIdx.x, slice = tid % TK, key_group = tid / TK, lane = tid % 32, warp = tid / 32;
  const int64_t kv_width = a.s.kv_heads * D;
  const int64_t row0 = (static_cast<int64_t>(a.slots[b]) * a.s.capacity + first) * kv_width + kh * D + slice * E;
  const T* k = static_cast<const T*>(a.cache.k) + row0;
  const T* v = static_cast<const T*>(a.cache.v) + row0;

  __shared__ float scores[G][kMaxChunk];
  __shared__ float stats[G][2];
  __shared__ float sums[kWarps][G][D];

  // Scores: each key's dot products over its TK threads' slices, summed across them by shuffles.
  {
    float query[G][E];
#pragma unroll
    for (int g = 0; g < G; ++g) {
#pragma unroll
      for (int part = 0; part < E / 8; ++part)
        load_bf16x8(a.q + (b * a.s.heads + h0 + g) * D + slice * E + part * 8, &query[g][part * 8]);
    }
    const float factor = a.cache.k_scale == nullptr ? a.scale : a.scale * a.cache.k_scale[kh];
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
        unpack<T>(raw[u], key);
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
          for (int g = 0; g < G; ++g) scores[g][j] = dot[g] * factor;
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
  // Softmax statistics: a warp per query head; the scores become exp(score - max).
  if (warp < G) {
    float max = -INFINITY;
    for (int j = lane; j < n; j += 32) max = fmaxf(max, scores[warp][j]);
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) max = fmaxf(max, __shfl_xor_sync(0xffffffffu, max, offset));
    float total = 0.0f;
    for (int j = lane; j < n; j += 32) {
      const float p = expf(scores[warp][j] - max);
      scores[warp][j] = p;
      total += p;
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset /= 2) total += __shfl_xor_sync(0xffffffffu, total, offset);
    if (lane == 0) {
      stats[warp][0] = max;
      stats[warp][1] = total;
    }
  }
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
      unpack<T>(raw[u], value);
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
  const float v_factor = a.cache.v_scale == nullptr ? 1.0f : a.cache.v_scale[kh];
  for (int i = tid; i < G * D; i += kDecodeThreads) {
    const int g = i / D, e = i % D;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) sum += sums[w][g][e];
    const int64_t partial = (b * a.s.heads + h0 + g) * a.chunks + chunk;
    a.partial_out[partial * D + e] = sum * v_factor;
    if (e == 0) a.partial_stats[partial] = make_float2(stats[g][0], stats[g][1]);
  }
}

// Block per (sequence, head), a thread per output element: the chunks' partial sums rescaled to their
// common max, divided by the rescaled total. The chunks' statistics are read by all threads at once
// and their weights kept in shared memory (a chunk's weight is every thread's), so the only serial
// loop left is each thread's sum over independent loads.
template <int D>
__global__ void __launch_bounds__(D) combine_kernel(DecodeArgs a, uint16_t* out) {
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
  out[bh * D + e] = float_to_bf16(((numerator[0] + numerator[1]) + (numerator[2] + numerator[3])) / denominator);
}

// Query heads per block: the largest of 4, 2, 1 that divides the group (query heads per KV head).
int heads_per_block(const KvShape& s) {
  const int64_t group = s.heads / s.kv_heads;
  return group % 4 == 0 ? 4 : group % 2 == 0 ? 2 : 1;
}

// Keys per block: 256, halved (down to 32) while the grid would have fewer than two blocks per SM, so
// that a small batch still spreads over the GPU.
int chunk_for(const KvShape& s, int64_t batch) {
  const int sms = current_device_attribute(cudaDevAttrMultiProcessorCount);
  const int64_t blocks_per_chunk = batch * s.heads / heads_per_block(s);
  int chunk = kMaxChunk;
  while (chunk > kMinChunk && blocks_per_chunk * ((s.capacity + chunk - 1) / chunk) < 2 * sms &&
         (s.capacity + chunk / 2 - 1) / (chunk / 2) <= kMaxCombine)
    chunk /= 2;
  if ((s.capacity + chunk - 1) / chunk > kMaxCombine)
    throw Error("decode_attention: a cache of " + std::to_string(s.capacity) + " positions is longer than the GPU "
                "kernel's " + std::to_string(kMaxChunk * kMaxCombine));
  return chunk;
}

template <int D, typename T, int G>
void launch_chunks(const DecodeArgs& a, int64_t batch, cudaStream_t stream) {
  const int64_t head_groups = a.s.kv_heads * (a.s.heads / a.s.kv_heads / G);
  if (a.chunks >= (int64_t{1} << 31) || head_groups > 65535 || batch > 65535)
    throw Error("decode_attention: " + std::to_string(batch) + " sequences of " + std::to_string(a.chunks) +
                " chunks and " + std::to_string(head_groups) + " head groups are too many for one launch");
  const dim3 grid(static_cast<unsigned>(a.chunks), static_cast<unsigned>(head_groups), static_cast<unsigned>(batch));
  launch_dependent(decode_chunk_kernel<D, T, G>, grid, dim3(kDecodeThreads), 0, stream, 1, a);
}

template <int D, typename T>
void launch_decode(const DecodeArgs& a, int64_t batch, uint16_t* out, cudaStream_t stream) {
  switch (heads_per_block(a.s)) {
    case 4: launch_chunks<D, T, 4>(a, batch, stream); break;
    case 2: launch_chunks<D, T, 2>(a, batch, stream); break;
    default: launch_chunks<D, T, 1>(a, batch, stream); break;
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

size_t decode_attention_workspace(const KvShape& s, int64_t batch) {
  const int64_t chunk = chunk_for(s, batch), chunks = (s.capacity + chunk - 1) / chunk;
  return static_cast<size_t>(batch * s.heads * chunks) * (s.head_dim * sizeof(float) + sizeof(float2));
}

void decode_attention(const KvShape& s, int64_t batch, const uint16_t* q, const KvConstData& cache, const int32_t* slots,
                      const int32_t* lengths, float scale, uint16_t* out, void* workspace, cudaStream_t stream) {
  if (batch == 0) return;
  const int chunk = chunk_for(s, batch);
  const int64_t chunks = (s.capacity + chunk - 1) / chunk;
  auto* partial_out = static_cast<float*>(workspace);
  // After the [batch, heads, chunks, D] floats: 8-byte aligned, as D is even.
  auto* partial_stats = reinterpret_cast<float2*>(partial_out + batch * s.heads * chunks * s.head_dim);
  const DecodeArgs a{s, q, cache, slots, lengths, scale, chunk, chunks, partial_out, partial_stats};
  const bool fp8 = cache.k_scale != nullptr;
  if (s.head_dim == 64) {
    fp8 ? launch_decode<64, uint8_t>(a, batch, out, stream) : launch_decode<64, uint16_t>(a, batch, out, stream);
  } else if (s.head_dim == 128) {
    fp8 ? launch_decode<128, uint8_t>(a, batch, out, stream) : launch_decode<128, uint16_t>(a, batch, out, stream);
  } else {
    throw Error("decode_attention: the GPU kernel takes head_dim 64 or 128, got " + std::to_string(s.head_dim));
  }
}

}  // namespace fp8kit::cuda
