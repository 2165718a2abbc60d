// Causal attention kernels: one block per (batch, head), one thread per query row (forward, and the
// backward's dq) or key column (the backward's dk, dv); the head's K and V, later its scaled queries
// and output gradients, sit in shared memory. Every dot product is an explicit fmaf chain in d order
// and the softmax uses the same expf and division in both kernels, so the backward recomputes the
// forward's probabilities bit for bit from the saved row max and sum.
#include "ops/cuda/attention.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "base/error.h"
#include "numerics/cast.h"
#include "ops/cuda/check.h"
#include "ops/cuda/dropout.cuh"
#include "ops/cuda/round.cuh"

namespace fp8kit::cuda {
namespace {

struct Params {
  int batch, seq, heads;
  float scale, keep;  // query scale (bf16-rounded when bf16), dropout keep probability
  bool dropout;
  uint64_t seed;
  const uint64_t* step;
  uint32_t site, threshold;
};

template <int kD>
__device__ __forceinline__ float dot(const float* a, const float* b) {
  float s = 0.0f;
#pragma unroll
  for (int d = 0; d < kD; ++d) s = fmaf(a[d], b[d], s);
  return s;
}

// Probability of key j for a query with scaled row qs and softmax (max, sum); the same expression in
// every kernel.
template <int kD, bool kBf16>
__device__ __forceinline__ float probability(const float* qs, const float* kj, float max, float sum) {
  const float s = maybe_bf16(dot<kD>(qs, kj), kBf16);
  return maybe_bf16(expf(s - max) / sum, kBf16);
}

template <int kD, bool kBf16>
__device__ __forceinline__ void load_scaled_query(const float* q, float scale, float* qs) {
#pragma unroll
  for (int d = 0; d < kD; ++d) qs[d] = maybe_bf16(q[d] * scale, kBf16);
}

// Copies head h of sequence b of k and v ([batch, T, C] row-major) into ks, vs ([T, kD] each, shared
// memory), the whole block cooperating, then waits for the block.
template <int kD>
__device__ __forceinline__ void load_head_keys_values(const float* k, const float* v, int b, int h, int T, int C,
                                                      float* ks, float* vs) {
  for (int idx = threadIdx.x; idx < T * kD; idx += blockDim.x) {
    const int64_t g = (static_cast<int64_t>(b) * T + idx / kD) * C + h * kD + idx % kD;
    ks[idx] = k[g];
    vs[idx] = v[g];
  }
  __syncthreads();
}

constexpr int kMaxThreads = 256;  // rows beyond it loop; keeps the register budget per block

template <int kD, bool kBf16>
__global__ void __launch_bounds__(kMaxThreads)
    forward_kernel(Params p, const float* q, const float* k, const float* v, float* stats, float* out) {
  extern __shared__ float smem[];
  const int T = p.seq, C = p.heads * kD;
  const int bh = blockIdx.x, b = bh / p.heads, h = bh % p.heads;
  float* ks = smem;          // [T, kD]
  float* vs = smem + T * kD;  // [T, kD]
  load_head_keys_values<kD>(k, v, b, h, T, C, ks, vs);
  const DeviceDropoutMask mask(p.seed, p.dropout ? *p.step : 0, p.site, p.threshold);
  for (int i = threadIdx.x; i < T; i += blockDim.x) {
    const int64_t row = (static_cast<int64_t>(b) * T + i) * C + h * kD;
    float qs[kD], acc[kD];
    load_scaled_query<kD, kBf16>(q + row, p.scale, qs);
    float max = -INFINITY;
    #pragma unroll 4
    for (int j = 0; j <= i; ++j) max = fmaxf(max, maybe_bf16(dot<kD>(qs, ks + j * kD), kBf16));
    float sum = 0.0f;
    #pragma unroll 4
    for (int j = 0; j <= i; ++j) sum += expf(maybe_bf16(dot<kD>(qs, ks + j * kD), kBf16) - max);
#pragma unroll
    for (int d = 0; d < kD; ++d) acc[d] = 0.0f;
    const uint32_t first = static_cast<uint32_t>((static_cast<int64_t>(bh) * T + i) * T);
    #pragma unroll 4
    for (int j = 0; j <= i; ++j) {
      float pd = probability<kD, kBf16>(qs, ks + j * kD, max, sum);
      if (p.dropout) pd = mask.apply(maybe_bf16(pd / p.keep, kBf16), first + j);
#pragma unroll
      for (int d = 0; d < kD; ++d) acc[d] = fmaf(pd, vs[j * kD + d], acc[d]);
    }
#pragma unroll
    for (int d = 0; d < kD; ++d) out[row + d] = maybe_bf16(acc[d], kBf16);
    stats[(static_cast<int64_t>(bh) * T + i) * 2] = max;
    stats[(static_cast<int64_t>(bh) * T + i) * 2 + 1] = sum;
  }
}

template <int kD, bool kBf16>
__global__ void __launch_bounds__(kMaxThreads)
    backward_kernel(Params p, const float* q, const float* k, const float* v, const float* stats,
                                const float* dout, float* dq, float* dk, float* dv) {
  extern __shared__ float smem[];
  const int T = p.seq, C = p.heads * kD;
  const int bh = blockIdx.x, b = bh / p.heads, h = bh % p.heads;
  float* ks = smem;               // phase 1: [T, kD] keys; phase 2: scaled queries
  float* vs = smem + T * kD;      // phase 1: [T, kD] values; phase 2: output gradients
  float* rows = smem + 2 * T * kD;  // [T, 3]: softmax max, sum, and sum_j dp_ij P_ij
  load_head_keys_values<kD>(k, v, b, h, T, C, ks, vs);
  const DeviceDropoutMask mask(p.seed, p.dropout ? *p.step : 0, p.site, p.threshold);
  // Phase 1, thread per query row i: the softmax backward's row dot and dq.
  for (int i = threadIdx.x; i < T; i += blockDim.x) {
    const int64_t row = (static_cast<int64_t>(b) * T + i) * C + h * kD;
    float qs[kD], g[kD], acc[kD];
    load_scaled_query<kD, kBf16>(q + row, p.scale, qs);
#pragma unroll
    for (int d = 0; d < kD; ++d) g[d] = dout[row + d];
    const float* row_stats = stats + (static_cast<int64_t>(bh) * T + i) * 2;
    const float max = row_stats[0], sum = row_stats[1];
    const uint32_t first = static_cast<uint32_t>((static_cast<int64_t>(bh) * T + i) * T);
    float row_dot = 0.0f;
    #pragma unroll 4
    for (int j = 0; j <= i; ++j) {
      const float P = probability<kD, kBf16>(qs, ks + j * kD, max, sum);
      float dp = dot<kD>(g, vs + j * kD);
      if (p.dropout) dp = mask.apply(dp / p.keep, first + j);
      row_dot += dp * P;
    }
#pragma unroll
    for (int d = 0; d < kD; ++d) acc[d] = 0.0f;
    #pragma unroll 4
    for (int j = 0; j <= i; ++j) {
      const float P = probability<kD, kBf16>(qs, ks + j * kD, max, sum);
      float dp = dot<kD>(g, vs + j * kD);
      if (p.dropout) dp = mask.apply(dp / p.keep, first + j);
      const float ds = P * (dp - row_dot);
#pragma unroll
      for (int d = 0; d < kD; ++d) acc[d] = fmaf(ds, ks[j * kD + d], acc[d]);
    }
#pragma unroll
    for (int d = 0; d < kD; ++d) dq[row + d] = acc[d] * p.scale;
    rows[i * 3] = max;
    rows[i * 3 + 1] = sum;
    rows[i * 3 + 2] = row_dot;
  }
  __syncthreads();
  for (int idx = threadIdx.x; idx < T * kD; idx += blockDim.x) {
    const int i = idx / kD, d = idx % kD;
    const int64_t g = (static_cast<int64_t>(b) * T + i) * C + h * kD + d;
    ks[idx] = maybe_bf16(q[g] * p.scale, kBf16);
    vs[idx] = dout[g];
  }
  __syncthreads();
  // Phase 2, thread per key column j: dk_j = sum_i ds_ij qs_i, dv_j = sum_i pd_ij dout_i over i >= j.
  for (int j = threadIdx.x; j < T; j += blockDim.x) {
    const int64_t row = (static_cast<int64_t>(b) * T + j) * C + h * kD;
    float kj[kD], vj[kD], dkj[kD], dvj[kD];
#pragma unroll
    for (int d = 0; d < kD; ++d) {
      kj[d] = k[row + d];
      vj[d] = v[row + d];
      dkj[d] = dvj[d] = 0.0f;
    }
#pragma unroll 4
    for (int i = j; i < T; ++i) {
      const float* qs = ks + i * kD;
      const float* g = vs + i * kD;
      const float P = probability<kD, kBf16>(qs, kj, rows[i * 3], rows[i * 3 + 1]);
      float dp = dot<kD>(g, vj), pd = P;
      if (p.dropout) {
        const uint32_t index = static_cast<uint32_t>((static_cast<int64_t>(bh) * T + i) * T + j);
        pd = mask.apply(maybe_bf16(P / p.keep, kBf16), index);
        dp = mask.apply(dp / p.keep, index);
      }
      const float ds = P * (dp - rows[i * 3 + 2]);
#pragma unroll
      for (int d = 0; d < kD; ++d) {
        dvj[d] = fmaf(pd, g[d], dvj[d]);
        dkj[d] = fmaf(ds, qs[d], dkj[d]);
      }
    }
#pragma unroll
    for (int d = 0; d < kD; ++d) {
      dk[row + d] = dkj[d];
      dv[row + d] = dvj[d];
    }
  }
}

Params params(const ops::AttentionShape& s, const DropoutSite& dropout, bool bf16, const char* what) {
  if (s.batch < 0 || s.seq <= 0 || s.heads <= 0 || s.seq > 1024)
    throw Error(std::string(what) + ": need batch >= 0, heads > 0 and seq in [1, 1024]");
  if (s.head_dim != 16 && s.head_dim != 32 && s.head_dim != 64)
    throw Error(std::string(what) + ": head_dim " + std::to_string(s.head_dim) + " is not one of 16, 32, 64");
  if (s.batch * s.heads * s.seq * s.seq > int64_t{UINT32_MAX})
    throw Error(std::string(what) + ": attention probabilities are limited to 2^32 elements (dropout indices)");
  const size_t smem = (2 * s.seq * s.head_dim + 3 * s.seq) * sizeof(float);
  if (smem > 48 * 1024)
    throw Error(std::string(what) + ": seq " + std::to_string(s.seq) + " x head_dim " + std::to_string(s.head_dim) +
                " needs more than 48 KB of shared memory");
  if (dropout.active && dropout.step == nullptr) throw Error(std::string(what) + ": dropout needs the step counter");
  float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
  if (bf16) scale = ::fp8kit::round_bf16(scale);
  return Params{static_cast<int>(s.batch), static_cast<int>(s.seq), static_cast<int>(s.heads), scale,
                ops::dropout_keep_prob(dropout.rate, bf16), dropout.active, dropout.seed, dropout.step, dropout.site,
                dropout_threshold(dropout.rate)};
}

// Calls f.template operator()<kD, kBf16>().
template <typename F>
void dispatch(int64_t head_dim, bool bf16, F&& f) {
  auto by_dim = [&]<bool kBf16>() {
    switch (head_dim) {
      case 16: return f.template operator()<16, kBf16>();
      case 32: return f.template operator()<32, kBf16>();
      default: return f.template operator()<64, kBf16>();
    }
  };
  if (bf16) {
    by_dim.template operator()<true>();
  } else {
    by_dim.template operator()<false>();
  }
}

}  // namespace

void causal_attention_forward(const ops::AttentionShape& shape, const float* q, const float* k, const float* v,
                              const DropoutSite& dropout, bool bf16, float* stats, float* out, cudaStream_t stream) {
  const Params p = params(shape, dropout, bf16, "causal_attention_forward");
  if (shape.batch == 0) return;
  const unsigned threads = static_cast<unsigned>(std::min<int64_t>((shape.seq + 31) / 32 * 32, kMaxThreads));
  const size_t smem = 2 * shape.seq * shape.head_dim * sizeof(float);
  dispatch(shape.head_dim, bf16, [&]<int kD, bool kBf16>() {
    forward_kernel<kD, kBf16><<<static_cast<unsigned>(shape.batch * shape.heads), threads, smem, stream>>>(p, q, k, v,
                                                                                                          stats, out);
  });
  check_launch("causal_attention_forward");
}

void causal_attention_backward(const ops::AttentionShape& shape, const float* q, const float* k, const float* v,
                               const float* stats, const DropoutSite& dropout, bool bf16, const float* dout,
                               float* dq, float* dk, float* dv, cudaStream_t stream) {
  const Params p = params(shape, dropout, bf16, "causal_attention_backward");
  if (shape.batch == 0) return;
  const unsigned threads = static_cast<unsigned>(std::min<int64_t>((shape.seq + 31) / 32 * 32, kMaxThreads));
  const size_t smem = (2 * shape.seq * shape.head_dim + 3 * shape.seq) * sizeof(float);
  dispatch(shape.head_dim, bf16, [&]<int kD, bool kBf16>() {
    backward_kernel<kD, kBf16><<<static_cast<unsigned>(shape.batch * shape.heads), threads, smem, stream>>>(
        p, q, k, v, stats, dout, dq, dk, dv);
  });
  check_launch("causal_attention_backward");
}

}  // namespace fp8kit::cuda
