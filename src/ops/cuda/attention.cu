// Causal attention kernels. Each (batch, head) is split over blocks of kTile query rows (forward, the
// backward's dq) or key columns (dk, dv), heaviest tiles first. Inside a block, the per-pair work
// (scores, probabilities, dropout, output-gradient dots) runs one warp per row with lanes over keys
// into shared-memory tiles; only the sums that must run in order (softmax sum, row dot, and each
// output element's chain) stay serial, one thread per sum. The backward is two kernels: dq (rows;
// it also writes every pair's dropped probability and score gradient to a scratch) and dk/dv
// (columns: only the in-order sums over those pairs).
// Every dot product is an explicit fmaf chain in d order, every sum runs in key (or query) order,
// and the softmax uses the same expf and division in both directions, so the backward recomputes
// the forward's probabilities bit for bit from the saved row max and sum, and every result is bit
// for bit that of the former one-thread-per-row kernels (bench/cuda/attention.cpp prints a hash).
#include "ops/cuda/attention.h"

#include <cuda_pipeline.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "base/error.h"
#include "numerics/cast.h"
#include "ops/cuda/aligned.h"
#include "ops/cuda/dropout.cuh"
#include "ops/cuda/round.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

struct Params {
  int batch, seq, heads;
  float scale;   // query scale (bf16-rounded when bf16)
  bool aligned;  // q, k, v (and dout) 16-byte aligned: rows are read in 16-byte pieces
  DropoutArgs dropout;  // on the probabilities
};

constexpr int kThreads = 256;  // 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int kTile = 32;         // query rows or key columns per block
constexpr int kChainThreads = 4;  // threads per row in the serial output chains (kD / 4 elements each)

// Row stride of a [n, kD] tile in shared memory: lanes reading 16-byte pieces of different rows hit
// different banks.
template <int kD>
constexpr int padded() {
  return kD + 4;
}

// Row stride of a [kTile, n] tile of per-pair values: odd, so that threads reading the same column of
// different rows hit different banks.
__host__ __device__ constexpr int pair_stride(int n) { return n | 1; }

// Row stride of the dk/dv kernel's [kTile, n] column tiles: 2 mod 32, so that both the load (32
// columns of one row) and the chains (8 columns at one step) hit different banks.
__host__ __device__ constexpr int column_stride(int n) { return (n + 31) / 32 * 32 + 2; }

// Shared-memory floats of each kernel for the largest tile (keys or rows = seq).
template <int kD>
constexpr int64_t forward_floats(int64_t seq) {
  return seq * padded<kD>() + kTile * padded<kD>() + kTile * pair_stride(static_cast<int>(seq)) + 2 * kTile;
}
template <int kD>
constexpr int64_t dq_floats(int64_t seq) {
  return seq * padded<kD>() + 2 * kTile * padded<kD>() + 2 * kTile * pair_stride(static_cast<int>(seq)) + 3 * kTile;
}
template <int kD>
constexpr int64_t dkv_floats(int64_t seq) {
  return 2 * seq * padded<kD>() + 2 * kTile * column_stride(static_cast<int>(seq));
}

// kD (a multiple of 4) floats from 16-byte aligned shared memory into registers.
template <int kD>
__device__ __forceinline__ void load_row(const float* src, float* dst) {
#pragma unroll
  for (int d = 0; d < kD; d += 4) {
    const float4 x = *reinterpret_cast<const float4*>(src + d);
    dst[d] = x.x, dst[d + 1] = x.y, dst[d + 2] = x.z, dst[d + 3] = x.w;
  }
}

// acc = sum over keys j = 0 .. i of w[j] * m[j kP .. j kP + kPer) in key order (an fma chain per
// element), m in shared memory: a query row's output (pd x v) in the forward, its dq (ds x k).
template <int kPer, int kP>
__device__ __forceinline__ void key_order_sum(const float* w, const float* m, int i, float (&acc)[kPer]) {
#pragma unroll
  for (int e = 0; e < kPer; ++e) acc[e] = 0.0f;
#pragma unroll 4
  for (int j = 0; j <= i; ++j) {
    const float wj = w[j];
    float mj[kPer];
    load_row<kPer>(m + j * kP, mj);
#pragma unroll
    for (int e = 0; e < kPer; ++e) acc[e] = fmaf(wj, mj[e], acc[e]);
  }
}

template <int kD>
__device__ __forceinline__ float dot(const float* a, const float* b) {
  float s = 0.0f;
#pragma unroll
  for (int d = 0; d < kD; ++d) s = fmaf(a[d], b[d], s);
  return s;
}

__device__ __forceinline__ float warp_max(float m) {
#pragma unroll
  for (int offset = 16; offset > 0; offset /= 2) m = fmaxf(m, __shfl_xor_sync(0xFFFFFFFFu, m, offset));
  return m;
}

// The score of a query (scaled row qs) and key kj; every kernel computes it with this expression.
template <int kD, bool kBf16>
__device__ __forceinline__ float score(const float* qs, const float* kj) {
  return maybe_bf16(dot<kD>(qs, kj), kBf16);
}

// A probability from its score's exp(score - max) and the row's sum; the same expression in every kernel.
template <bool kBf16>
__device__ __forceinline__ float probability(float exp_score, float sum) {
  return maybe_bf16(exp_score / sum, kBf16);
}

// Copies rows [first, first + n) of head h of sequence b of x ([batch, T, C] row-major) into dst
// ([n, padded<kD>], shared memory), times `scale` and bf16-rounded when kScaled (the scaled queries
// every score multiplies). aligned: x is 16-byte aligned, so (as C and h * kD are multiples of 4)
// every row can be read in 16-byte pieces, several in flight per thread.
template <int kD, bool kScaled = false, bool kBf16 = false>
__device__ __forceinline__ void load_rows(const float* x, bool aligned, int b, int h, int T, int C, int first, int n,
                                          float* dst, float scale = 1.0f) {
  const auto store = [&](float* to, float value) { *to = kScaled ? maybe_bf16(value * scale, kBf16) : value; };
  if (aligned) {
    constexpr int kQuads = kD / 4;
#pragma unroll 4
    for (int idx = threadIdx.x; idx < n * kQuads; idx += blockDim.x) {
      const int r = idx / kQuads, d = idx % kQuads * 4;
      const float4 value =
          *reinterpret_cast<const float4*>(x + (static_cast<int64_t>(b) * T + first + r) * C + h * kD + d);
      float* to = dst + r * padded<kD>() + d;
      store(to, value.x), store(to + 1, value.y), store(to + 2, value.z), store(to + 3, value.w);
    }
  } else {
#pragma unroll 4
    for (int idx = threadIdx.x; idx < n * kD; idx += blockDim.x) {
      const int r = idx / kD, d = idx % kD;
      store(dst + r * padded<kD>() + d, x[(static_cast<int64_t>(b) * T + first + r) * C + h * kD + d]);
    }
  }
}

// load_rows without waiting when x is aligned: the copies land while the block computes; wait with
// __pipeline_wait_prior(0) and a barrier. Unaligned rows are loaded at once (the wait then has nothing
// to wait for).
template <int kD>
__device__ __forceinline__ void load_rows_async(const float* x, bool aligned, int b, int h, int T, int C, int first,
                                                int n, float* dst) {
  if (!aligned) return load_rows<kD>(x, false, b, h, T, C, first, n, dst);
  constexpr int kQuads = kD / 4;
  for (int idx = threadIdx.x; idx < n * kQuads; idx += blockDim.x) {
    const int r = idx / kQuads, d = idx % kQuads * 4;
    __pipeline_memcpy_async(dst + r * padded<kD>() + d, x + (static_cast<int64_t>(b) * T + first + r) * C + h * kD + d,
                            16);
  }
  __pipeline_commit();
}

// Block (bh, blockIdx.y): query rows [r0, r0 + rows), keys [0, r0 + rows).
template <int kD, bool kBf16>
__global__ void __launch_bounds__(kThreads)
    forward_kernel(Params p, const float* q, const float* k, const float* v, float* stats, float* out) {
  extern __shared__ float4 smem4[];
  constexpr int kP = padded<kD>();
  const int T = p.seq, C = p.heads * kD;
  const int bh = blockIdx.x, b = bh / p.heads, h = bh % p.heads;
  const int r0 = (gridDim.y - 1 - blockIdx.y) * kTile, rows = min(kTile, T - r0), keys = r0 + rows;
  const int stride = pair_stride(keys);
  float* kv = reinterpret_cast<float*>(smem4);  // [keys, kP]: the keys, then (once scored) the values
  float* qs = kv + keys * kP;                   // [kTile, kP] scaled queries
  float* pairs = qs + kTile * kP;               // [kTile, stride]: scores, exp(score - max), dropped probs
  float* row_max = pairs + kTile * stride;      // [kTile]
  float* row_sum = row_max + kTile;             // [kTile]
  load_rows<kD>(k, p.aligned, b, h, T, C, 0, keys, kv);
  load_rows<kD, true, kBf16>(q, p.aligned, b, h, T, C, r0, rows, qs, p.scale);
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Warp per row, lanes over keys: scores, their max, exp(score - max).
  for (int r = warp; r < rows; r += kWarps) {
    const int i = r0 + r;
    float qr[kD];
    load_row<kD>(qs + r * kP, qr);
    float* row = pairs + r * stride;
    float max = -INFINITY;
#pragma unroll 2
    for (int j = lane; j <= i; j += 32) {
      float kj[kD];
      load_row<kD>(kv + j * kP, kj);
      row[j] = score<kD, kBf16>(qr, kj);
      max = fmaxf(max, row[j]);
    }
    max = warp_max(max);
    for (int j = lane; j <= i; j += 32) row[j] = expf(row[j] - max);
    if (lane == 0) row_max[r] = max;
  }
  __syncthreads();
  // The keys are no longer needed: the values replace them while the softmax completes.
  load_rows_async<kD>(v, p.aligned, b, h, T, C, 0, keys, kv);
  // Thread per row: the softmax sum, in key order.
  if (threadIdx.x < rows) {
    const int r = threadIdx.x, i = r0 + r;
    const float* row = pairs + r * stride;
    float sum = 0.0f;
#pragma unroll 8
    for (int j = 0; j <= i; ++j) sum += row[j];
    row_sum[r] = sum;
    stats[(static_cast<int64_t>(bh) * T + i) * 2] = row_max[r];
    stats[(static_cast<int64_t>(bh) * T + i) * 2 + 1] = sum;
  }
  __syncthreads();
  // Warp per row: probabilities, dropped.
  const DeviceDropoutMask mask = p.dropout.mask();
  for (int r = warp; r < rows; r += kWarps) {
    const int i = r0 + r;
    const float sum = row_sum[r];
    float* row = pairs + r * stride;
    const uint32_t first = static_cast<uint32_t>((static_cast<int64_t>(bh) * T + i) * T);
#pragma unroll 2
    for (int j = lane; j <= i; j += 32) {
      row[j] = p.dropout.forward(probability<kBf16>(row[j], sum), first + j, kBf16, mask);
    }
  }
  __pipeline_wait_prior(0);
  __syncthreads();
  // kChainThreads threads per row, kD / kChainThreads output elements each: out_i = sum_j pd_ij v_j
  // in key order.
  constexpr int kPer = kD / kChainThreads;
  const int r = threadIdx.x / kChainThreads, d0 = threadIdx.x % kChainThreads * kPer;
  if (r < rows) {
    const int i = r0 + r;
    float acc[kPer];
    key_order_sum<kPer, kP>(pairs + r * stride, kv + d0, i, acc);
    const int64_t at = (static_cast<int64_t>(b) * T + i) * C + h * kD + d0;
#pragma unroll
    for (int e = 0; e < kPer; ++e) out[at + e] = maybe_bf16(acc[e], kBf16);
  }
}

// Offset of pair (i, j <= i) in a head's packed lower triangle of per-pair values.
__device__ __forceinline__ int64_t triangle(int i, int j) { return static_cast<int64_t>(i) * (i + 1) / 2 + j; }

// Block (bh0 + blockIdx.x, blockIdx.y): query rows [r0, r0 + rows): row_dot_i = sum_j dp_ij P_ij and
// dq_i = scale * sum_j ds_ij k_j with ds_ij = P_ij (dp_ij - row_dot_i), both in key order; writes
// each pair's dropped probability pd_ij and ds_ij to pds, dss ([heads of this launch, triangle]).
template <int kD, bool kBf16>
__global__ void __launch_bounds__(kThreads)
    backward_dq_kernel(Params p, int bh0, const float* q, const float* k, const float* v, const float* stats,
                       const float* dout, float* dq, float* pd_pairs, float* ds_pairs) {
  extern __shared__ float4 smem4[];
  constexpr int kP = padded<kD>();
  const int T = p.seq, C = p.heads * kD;
  const int bh = bh0 + blockIdx.x, b = bh / p.heads, h = bh % p.heads;
  const int r0 = (gridDim.y - 1 - blockIdx.y) * kTile, rows = min(kTile, T - r0), keys = r0 + rows;
  const int stride = pair_stride(keys);
  const int64_t pairs = static_cast<int64_t>(blockIdx.x) * T * (T + 1) / 2;  // this head's triangle
  float* kv = reinterpret_cast<float*>(smem4);  // [keys, kP]: the keys, then the values, then the keys
  float* qs = kv + keys * kP;                   // [kTile, kP] scaled queries
  float* gs = qs + kTile * kP;                  // [kTile, kP] output gradients
  float* probs = gs + kTile * kP;               // [kTile, stride] P_ij, then ds_ij
  float* dps = probs + kTile * stride;          // [kTile, stride] dp_ij (dropped)
  float* row_stats = dps + kTile * stride;      // [kTile, 3]: max, sum, row_dot
  load_rows<kD>(k, p.aligned, b, h, T, C, 0, keys, kv);
  load_rows<kD, true, kBf16>(q, p.aligned, b, h, T, C, r0, rows, qs, p.scale);
  load_rows<kD>(dout, p.aligned, b, h, T, C, r0, rows, gs);
  for (int idx = threadIdx.x; idx < rows * 2; idx += blockDim.x)
    row_stats[idx / 2 * 3 + idx % 2] = stats[(static_cast<int64_t>(bh) * T + r0) * 2 + idx];
  __syncthreads();
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  // Warp per row, lanes over keys: P_ij.
  for (int r = warp; r < rows; r += kWarps) {
    const int i = r0 + r;
    float qr[kD];
    load_row<kD>(qs + r * kP, qr);
    const float max = row_stats[r * 3], sum = row_stats[r * 3 + 1];
#pragma unroll 2
    for (int j = lane; j <= i; j += 32) {
      float kj[kD];
      load_row<kD>(kv + j * kP, kj);
      probs[r * stride + j] = probability<kBf16>(expf(score<kD, kBf16>(qr, kj) - max), sum);
    }
  }
  __syncthreads();
  load_rows<kD>(v, p.aligned, b, h, T, C, 0, keys, kv);
  __syncthreads();
  // Warp per row, lanes over keys: dp_ij and pd_ij.
  const DeviceDropoutMask mask = p.dropout.mask();
  for (int r = warp; r < rows; r += kWarps) {
    const int i = r0 + r;
    float gr[kD];
    load_row<kD>(gs + r * kP, gr);
    const uint32_t first = static_cast<uint32_t>((static_cast<int64_t>(bh) * T + i) * T);
#pragma unroll 2
    for (int j = lane; j <= i; j += 32) {
      float vj[kD];
      load_row<kD>(kv + j * kP, vj);
      const float P = probs[r * stride + j];
      const float pd = p.dropout.forward(P, first + j, kBf16, mask);
      const float dp = p.dropout.backward(dot<kD>(gr, vj), first + j, mask);
      dps[r * stride + j] = dp;
      pd_pairs[pairs + triangle(i, j)] = pd;
    }
  }
  __syncthreads();
  // The keys come back for dq while the row dots and ds complete.
  load_rows_async<kD>(k, p.aligned, b, h, T, C, 0, keys, kv);
  // Thread per row: the softmax backward's row dot, in key order.
  if (threadIdx.x < rows) {
    const int r = threadIdx.x;
    float row_dot = 0.0f;
#pragma unroll 8
    for (int j = 0; j <= r0 + r; ++j) row_dot = fmaf(dps[r * stride + j], probs[r * stride + j], row_dot);
    row_stats[r * 3 + 2] = row_dot;
  }
  __syncthreads();
  // Warp per row: ds_ij = P_ij (dp_ij - row_dot_i), in place of P_ij.
  for (int r = warp; r < rows; r += kWarps) {
    const int i = r0 + r;
    const float row_dot = row_stats[r * 3 + 2];
    for (int j = lane; j <= i; j += 32) {
      const float ds = probs[r * stride + j] * (dps[r * stride + j] - row_dot);
      probs[r * stride + j] = ds;
      ds_pairs[pairs + triangle(i, j)] = ds;
    }
  }
  __pipeline_wait_prior(0);
  __syncthreads();
  // kChainThreads threads per row: dq.
  constexpr int kPer = kD / kChainThreads;
  const int r = threadIdx.x / kChainThreads, d0 = threadIdx.x % kChainThreads * kPer;
  if (r < rows) {
    const int i = r0 + r;
    float acc[kPer];
    key_order_sum<kPer, kP>(probs + r * stride, kv + d0, i, acc);
    const int64_t at = (static_cast<int64_t>(b) * T + i) * C + h * kD + d0;
#pragma unroll
    for (int e = 0; e < kPer; ++e) dq[at + e] = acc[e] * p.scale;
  }
}

// Block (bh0 + blockIdx.x, blockIdx.y): key columns [j0, j0 + cols), query rows [j0, T):
// dk_j = sum_i ds_ij qs_i and dv_j = sum_i pd_ij dout_i, both in query order, from the dq kernel's
// pd and ds.
template <int kD, bool kBf16>
__global__ void __launch_bounds__(kThreads)
    backward_dkv_kernel(Params p, int bh0, const float* q, const float* dout, const float* pd_pairs,
                        const float* ds_pairs, float* dk, float* dv) {
  extern __shared__ float4 smem4[];
  constexpr int kP = padded<kD>();
  const int T = p.seq, C = p.heads * kD;
  const int bh = bh0 + blockIdx.x, b = bh / p.heads, h = bh % p.heads;
  const int j0 = blockIdx.y * kTile, cols = min(kTile, T - j0), n = T - j0;
  const int stride = column_stride(n);
  const int64_t pairs = static_cast<int64_t>(blockIdx.x) * T * (T + 1) / 2;  // this head's triangle
  float* qs = reinterpret_cast<float*>(smem4);  // [n, kP] scaled queries of rows j0..T-1
  float* gs = qs + n * kP;                      // [n, kP] their output gradients
  float* pds = gs + n * kP;                     // [kTile, stride]: column c's pd for row j0 + c + t at t
  float* dss = pds + kTile * stride;            // [kTile, stride]: ds, likewise
  load_rows<kD, true, kBf16>(q, p.aligned, b, h, T, C, j0, n, qs, p.scale);
  load_rows<kD>(dout, p.aligned, b, h, T, C, j0, n, gs);
  // Row by row (32 consecutive columns: 128 bytes), the pairs below the diagonal.
#pragma unroll 4
  for (int idx = threadIdx.x; idx < n * kTile; idx += blockDim.x) {
    const int ri = idx / kTile, c = idx % kTile;  // row j0 + ri, column j0 + c
    if (c < cols && c <= ri) {
      const int64_t at = pairs + triangle(j0 + ri, j0 + c);
      pds[c * stride + ri - c] = pd_pairs[at];
      dss[c * stride + ri - c] = ds_pairs[at];
    }
  }
  __syncthreads();
  // kChainThreads threads per column: dk and dv.
  constexpr int kPer = kD / kChainThreads;
  const int c = threadIdx.x / kChainThreads, d0 = threadIdx.x % kChainThreads * kPer;
  if (c < cols) {
    float dkj[kPer], dvj[kPer];
#pragma unroll
    for (int e = 0; e < kPer; ++e) dkj[e] = dvj[e] = 0.0f;
#pragma unroll 4
    for (int t = 0; t < n - c; ++t) {
      const float pd = pds[c * stride + t], ds = dss[c * stride + t];
      const int ri = c + t;
      float gi[kPer], qi[kPer];
      load_row<kPer>(gs + ri * kP + d0, gi);
      load_row<kPer>(qs + ri * kP + d0, qi);
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        dvj[e] = fmaf(pd, gi[e], dvj[e]);
        dkj[e] = fmaf(ds, qi[e], dkj[e]);
      }
    }
    const int64_t at = (static_cast<int64_t>(b) * T + j0 + c) * C + h * kD + d0;
#pragma unroll
    for (int e = 0; e < kPer; ++e) {
      dk[at + e] = dkj[e];
      dv[at + e] = dvj[e];
    }
  }
}

bool aligned16(std::initializer_list<const float*> pointers) {
  return std::all_of(pointers.begin(), pointers.end(), [](const float* x) { return aligned(x, 16); });
}

Params params(const ops::AttentionShape& s, const DropoutSite& dropout, bool bf16, const char* what) {
  if (s.batch < 0 || s.seq <= 0 || s.heads <= 0 || s.seq > 1024)
    throw Error(std::string(what) + ": need batch >= 0, heads > 0 and seq in [1, 1024]");
  if (s.head_dim != 16 && s.head_dim != 32 && s.head_dim != 64)
    throw Error(std::string(what) + ": head_dim " + std::to_string(s.head_dim) + " is not one of 16, 32, 64");
  if (s.batch * s.heads * s.seq * s.seq > int64_t{UINT32_MAX})
    throw Error(std::string(what) + ": attention probabilities are limited to 2^32 elements (dropout indices)");
  float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
  if (bf16) scale = ::fp8kit::round_bf16(scale);
  return Params{static_cast<int>(s.batch), static_cast<int>(s.seq), static_cast<int>(s.heads), scale, false,
                dropout_args(dropout, bf16, what, s.batch * s.heads * s.seq * s.seq)};
}

// Checks that `floats` of dynamic shared memory fit in a block of this GPU (throws otherwise) and
// returns the bytes. The first call per kernel raises its limit to the GPU's opt-in maximum.
template <auto kernel>
size_t shared_memory(int64_t floats, const ops::AttentionShape& s, const char* what) {
  static const int limit = [] {
    int device = 0, bytes = 0;
    FP8KIT_CUDA_CHECK(cudaGetDevice(&device));
    FP8KIT_CUDA_CHECK(cudaDeviceGetAttribute(&bytes, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    FP8KIT_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes));
    return bytes;
  }();
  const size_t bytes = static_cast<size_t>(floats) * sizeof(float);
  if (bytes > static_cast<size_t>(limit))
    throw Error(std::string(what) + ": seq " + std::to_string(s.seq) + " x head_dim " + std::to_string(s.head_dim) +
                " needs " + std::to_string(bytes / 1024) + " KB of shared memory per block, more than this GPU's " +
                std::to_string(limit / 1024) + " KB");
  return bytes;
}

// Blocks: heads (of batch x heads) x tiles.
dim3 grid(int64_t heads, int64_t seq) {
  return dim3(static_cast<unsigned>(heads), static_cast<unsigned>((seq + kTile - 1) / kTile));
}

}  // namespace

void causal_attention_forward(const ops::AttentionShape& shape, const float* q, const float* k, const float* v,
                              const DropoutSite& dropout, bool bf16, float* stats, float* out, cudaStream_t stream) {
  const char* what = "causal_attention_forward";
  Params p = params(shape, dropout, bf16, what);
  p.aligned = aligned16({q, k, v});
  ops::dispatch_head_dim<64>(shape.head_dim, bf16, [&]<int kD, bool kBf16>() {
    const size_t smem = shared_memory<forward_kernel<kD, kBf16>>(forward_floats<kD>(shape.seq), shape, what);
    if (shape.batch == 0) return;
    forward_kernel<kD, kBf16><<<grid(shape.batch * shape.heads, shape.seq), kThreads, smem, stream>>>(p, q, k, v, stats, out);
    check_launch(what);
  });
}

namespace {

// The backward's pd and ds of every pair, from the dq kernel to the dk/dv kernel: [heads, triangle]
// floats each, for at most kScratchPairs pairs (32 MB) a launch; more heads run in several launches.
struct Scratch {
  int64_t triangle, heads, per_launch;
  size_t bytes() const { return 2 * static_cast<size_t>(per_launch * triangle) * sizeof(float); }
};

Scratch scratch_for(const ops::AttentionShape& s) {
  constexpr int64_t kScratchPairs = int64_t{1} << 22;
  const int64_t triangle = s.seq * (s.seq + 1) / 2, heads = s.batch * s.heads;
  if (heads <= 0 || triangle <= 0) return {triangle, heads, 0};  // nothing to do (or a shape params() refuses)
  return {triangle, heads, std::clamp<int64_t>(kScratchPairs / triangle, 1, heads)};
}

}  // namespace

size_t causal_attention_backward_workspace(const ops::AttentionShape& shape) { return scratch_for(shape).bytes(); }

void causal_attention_backward(const ops::AttentionShape& shape, const float* q, const float* k, const float* v,
                               const float* stats, const DropoutSite& dropout, bool bf16, const float* dout,
                               float* dq, float* dk, float* dv, void* workspace, size_t workspace_bytes,
                               cudaStream_t stream) {
  const char* what = "causal_attention_backward";
  Params p = params(shape, dropout, bf16, what);
  p.aligned = aligned16({q, k, v, dout});
  ops::dispatch_head_dim<64>(shape.head_dim, bf16, [&]<int kD, bool kBf16>() {
    const size_t dq_smem = shared_memory<backward_dq_kernel<kD, kBf16>>(dq_floats<kD>(shape.seq), shape, what);
    const size_t dkv_smem = shared_memory<backward_dkv_kernel<kD, kBf16>>(dkv_floats<kD>(shape.seq), shape, what);
    const Scratch scratch = scratch_for(shape);
    if (workspace == nullptr || workspace_bytes < scratch.bytes())
      throw Error(std::string(what) + ": the workspace has " + std::to_string(workspace_bytes) + " bytes, " +
                  std::to_string(scratch.bytes()) + " needed (causal_attention_backward_workspace)");
    if (shape.batch == 0) return;
    float* pd_pairs = static_cast<float*>(workspace);
    float* ds_pairs = pd_pairs + scratch.per_launch * scratch.triangle;
    for (int64_t bh0 = 0; bh0 < scratch.heads; bh0 += scratch.per_launch) {
      const dim3 blocks = grid(std::min(scratch.per_launch, scratch.heads - bh0), shape.seq);
      backward_dq_kernel<kD, kBf16><<<blocks, kThreads, dq_smem, stream>>>(p, static_cast<int>(bh0), q, k, v, stats,
                                                                           dout, dq, pd_pairs, ds_pairs);
      check_launch(what);
      backward_dkv_kernel<kD, kBf16><<<blocks, kThreads, dkv_smem, stream>>>(p, static_cast<int>(bh0), q, dout,
                                                                             pd_pairs, ds_pairs, dk, dv);
      check_launch(what);
    }
  });
}

}  // namespace fp8kit::cuda
