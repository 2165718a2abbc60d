// Causal attention forward/backward, one (batch, head) pair per task across the OpenMP threads.
// Only the causal lower triangle is computed (see ops/attention.h for why that is exact). The
// kernels are instantiated for common head sizes (compile-time loop bounds vectorise) and for
// float32 / bf16 rounding; other head sizes take the generic instance.
#include "ops/attention.h"

#include "base/error.h"
#include "numerics/cast.h"

#include <algorithm>
#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif
#include <cmath>
#include <vector>

namespace fp8kit::ops {

namespace {

constexpr int64_t kMaxHeadDim = 256;

template <bool kBf16>
inline float maybe_bf16(float x) {
  if constexpr (kBf16) return round_bf16(x);
  return x;
}

void check(const AttentionShape& s) {
  FP8KIT_CHECK(s.batch >= 0 && s.seq > 0 && s.heads > 0 && s.head_dim > 0,
               "attention shape must be positive: batch {} seq {} heads {} head_dim {}", s.batch, s.seq, s.heads,
               s.head_dim);
  FP8KIT_CHECK(s.head_dim <= kMaxHeadDim, "attention head_dim {} is above the supported {}", s.head_dim, kMaxHeadDim);
  FP8KIT_CHECK(s.batch * s.heads * s.seq * s.seq <= int64_t{UINT32_MAX},
               "attention probabilities are limited to 2^32 elements (dropout indices)");
}

// Per-thread scratch that grows to the largest shape seen, so steps do not allocate.
float* scratch(std::vector<float>& buffer, int64_t size) {
  if (buffer.size() < static_cast<size_t>(size)) buffer.resize(static_cast<size_t>(size));
  return buffer.data();
}

// Keras multiplies q by 1 / sqrt(key_dim) in the compute dtype (0.25 for 16: exact).
template <bool kBf16>
float query_scale(int64_t head_dim) {
  return maybe_bf16<kBf16>(static_cast<float>(1.0 / std::sqrt(static_cast<double>(head_dim))));
}

// The three inner kernels of attention, on one head of kD floats per row (kD == 0: runtime d).
// With AVX2+FMA and kD a multiple of 8 they use 8-wide registers; their float32 sums are then
// ordered differently from the scalar loops (the results agree to rounding, not bit for bit).

// out[j] = sum_d a[d] xt[d * ld + j] for j < n; xt is a head transposed to [d][ld]. The AVX2 path
// writes out[] up to n rounded up to 8 (ld and out must have that room).
template <int64_t kD>
inline void dot_columns(const float* __restrict a, const float* __restrict xt, int64_t ld, int64_t d_runtime,
                        int64_t n, float* __restrict out) {
#if defined(__AVX2__) && defined(__FMA__)
  if constexpr (kD > 0 && kD % 8 == 0) {
    for (int64_t j0 = 0; j0 < n; j0 += 8) {
      __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
      for (int64_t d = 0; d < kD; d += 2) {
        acc0 = _mm256_fmadd_ps(_mm256_set1_ps(a[d]), _mm256_loadu_ps(xt + d * ld + j0), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_set1_ps(a[d + 1]), _mm256_loadu_ps(xt + (d + 1) * ld + j0), acc1);
      }
      _mm256_storeu_ps(out + j0, _mm256_add_ps(acc0, acc1));
    }
    return;
  }
#endif
  const int64_t D = kD > 0 ? kD : d_runtime;
  for (int64_t j = 0; j < n; ++j) out[j] = 0.0f;
  for (int64_t d = 0; d < D; ++d) {
    const float ad = a[d];
    const float* __restrict xd = xt + d * ld;
    for (int64_t j = 0; j < n; ++j) out[j] += ad * xd[j];
  }
}

// out[0..D) = sum_{j < n} w[j] x[j * ld + 0..D).
template <int64_t kD>
inline void weighted_rows(const float* __restrict w, const float* __restrict x, int64_t ld, int64_t d_runtime,
                          int64_t n, float* __restrict out) {
#if defined(__AVX2__) && defined(__FMA__)
  if constexpr (kD > 0 && kD % 8 == 0) {
    constexpr int64_t kV = kD / 8;
    __m256 a[kV], b[kV];
    for (int64_t v = 0; v < kV; ++v) a[v] = b[v] = _mm256_setzero_ps();
    int64_t j = 0;
    for (; j + 1 < n; j += 2) {  // two accumulator sets hide the FMA latency
      const __m256 wj = _mm256_set1_ps(w[j]), wk = _mm256_set1_ps(w[j + 1]);
      for (int64_t v = 0; v < kV; ++v) {
        a[v] = _mm256_fmadd_ps(wj, _mm256_loadu_ps(x + j * ld + 8 * v), a[v]);
        b[v] = _mm256_fmadd_ps(wk, _mm256_loadu_ps(x + (j + 1) * ld + 8 * v), b[v]);
      }
    }
    if (j < n) {
      const __m256 wj = _mm256_set1_ps(w[j]);
      for (int64_t v = 0; v < kV; ++v) a[v] = _mm256_fmadd_ps(wj, _mm256_loadu_ps(x + j * ld + 8 * v), a[v]);
    }
    for (int64_t v = 0; v < kV; ++v) _mm256_storeu_ps(out + 8 * v, _mm256_add_ps(a[v], b[v]));
    return;
  }
#endif
  const int64_t D = kD > 0 ? kD : d_runtime;
  for (int64_t d = 0; d < D; ++d) out[d] = 0.0f;
  for (int64_t j = 0; j < n; ++j) {
    const float wj = w[j];
    const float* __restrict xj = x + j * ld;
    for (int64_t d = 0; d < D; ++d) out[d] += wj * xj[d];
  }
}

// y[j * D + 0..D) += w[j] g[0..D) for j < n (y contiguous rows of D).
template <int64_t kD>
inline void add_outer(const float* __restrict w, const float* __restrict g, int64_t d_runtime, int64_t n,
                      float* __restrict y) {
#if defined(__AVX2__) && defined(__FMA__)
  if constexpr (kD > 0 && kD % 8 == 0) {
    constexpr int64_t kV = kD / 8;
    __m256 gv[kV];
    for (int64_t v = 0; v < kV; ++v) gv[v] = _mm256_loadu_ps(g + 8 * v);
    for (int64_t j = 0; j < n; ++j) {
      const __m256 wj = _mm256_set1_ps(w[j]);
      for (int64_t v = 0; v < kV; ++v) {
        float* yj = y + j * kD + 8 * v;
        _mm256_storeu_ps(yj, _mm256_fmadd_ps(wj, gv[v], _mm256_loadu_ps(yj)));
      }
    }
    return;
  }
#endif
  const int64_t D = kD > 0 ? kD : d_runtime;
  for (int64_t j = 0; j < n; ++j) {
    const float wj = w[j];
    float* __restrict yj = y + j * D;
    for (int64_t d = 0; d < D; ++d) yj[d] += wj * g[d];
  }
}

// In-place softmax of s[0..n): s[j] = exp(s[j] - max) / sum. The AVX2 path uses a Cephes-style
// exp (range reduction by ln 2 and a degree-6 polynomial, within 2 ulp of expf; arguments below
// -87.3, whose exp is under FLT_MIN, give 0) and sums in 8 lanes. n counts the causal keys only.
inline void softmax_row(float* __restrict s, int64_t n) {
  int64_t j = 0;
  float max = -INFINITY, sum = 0.0f;
#if defined(__AVX2__) && defined(__FMA__)
  __m256 vmax = _mm256_set1_ps(-INFINITY);
  for (; j + 8 <= n; j += 8) vmax = _mm256_max_ps(vmax, _mm256_loadu_ps(s + j));
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, vmax);
  for (float l : lanes) max = std::max(max, l);
  for (; j < n; ++j) max = std::max(max, s[j]);
  const __m256 m = _mm256_set1_ps(max);
  __m256 vsum = _mm256_setzero_ps();
  j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 x = _mm256_sub_ps(_mm256_loadu_ps(s + j), m);
    const __m256 fx = _mm256_floor_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
    __m256 r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 y = _mm256_set1_ps(1.9875691500e-4f);
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
    y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
    y = _mm256_fmadd_ps(y, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
    y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
    y = _mm256_and_ps(y, _mm256_cmp_ps(x, _mm256_set1_ps(-87.3f), _CMP_GE_OQ));  // exp < FLT_MIN: 0
    _mm256_storeu_ps(s + j, y);
    vsum = _mm256_add_ps(vsum, y);
  }
  _mm256_store_ps(lanes, vsum);
  for (float l : lanes) sum += l;
#else
  for (int64_t i = 0; i < n; ++i) max = std::max(max, s[i]);
#endif
  for (; j < n; ++j) {
    s[j] = std::exp(s[j] - max);
    sum += s[j];
  }
  for (int64_t i = 0; i < n; ++i) s[i] /= sum;
}

// sum_j a[j] b[j] (8 lanes under AVX2, then the lanes in order).
inline float dot_product(const float* __restrict a, const float* __restrict b, int64_t n) {
  int64_t j = 0;
  float sum = 0.0f;
#if defined(__AVX2__) && defined(__FMA__)
  __m256 acc = _mm256_setzero_ps();
  for (; j + 8 <= n; j += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + j), _mm256_loadu_ps(b + j), acc);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, acc);
  for (float l : lanes) sum += l;
#endif
  for (; j < n; ++j) sum += a[j] * b[j];
  return sum;
}

template <int64_t kD, bool kBf16>
void forward_impl(const AttentionShape& shape, const float* q, const float* k, const float* v, const DropoutMask* mask,
                  float rate, float* probs, float* out) {
  const int64_t T = shape.seq, H = shape.heads, D = kD > 0 ? kD : shape.head_dim, C = H * D;
  const int64_t Tp = (T + 7) / 8 * 8;  // padded rows for the 8-wide kernels
  const float scale = query_scale<kBf16>(D);
  const float keep_prob = dropout_keep_prob(rate, kBf16);
#pragma omp parallel if (shape.batch * H * T * T >= 32768)
  {
    thread_local std::vector<float> kt_buffer, row_buffer, pd_buffer;
    float* __restrict kt = scratch(kt_buffer, D * Tp);
    float* __restrict s = scratch(row_buffer, Tp);
    float* __restrict pd = scratch(pd_buffer, Tp);
    alignas(32) float qs[kMaxHeadDim], acc[kMaxHeadDim];
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < shape.batch * H; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const float* kb = k + b * T * C + h * D;
      const float* vb = v + b * T * C + h * D;
      for (int64_t j = 0; j < T; ++j)
        for (int64_t d = 0; d < D; ++d) kt[d * Tp + j] = kb[j * C + d];
      float* P = probs + bh * T * T;
      for (int64_t i = 0; i < T; ++i) {
        const float* qi = q + (b * T + i) * C + h * D;
        for (int64_t d = 0; d < D; ++d) qs[d] = maybe_bf16<kBf16>(qi[d] * scale);
        const int64_t n = i + 1;  // keys 0..i
        dot_columns<kD>(qs, kt, Tp, D, n, s);
        for (int64_t j = 0; j < n; ++j) s[j] = maybe_bf16<kBf16>(s[j]);
        softmax_row(s, n);
        float* __restrict Pi = P + i * T;
        for (int64_t j = 0; j < n; ++j) Pi[j] = maybe_bf16<kBf16>(s[j]);
        if (mask != nullptr) {
          const uint32_t first = static_cast<uint32_t>((bh * T + i) * T), count = static_cast<uint32_t>(n);
          for (uint32_t j = 0; j < count; ++j) pd[j] = mask->apply(maybe_bf16<kBf16>(Pi[j] / keep_prob), first + j);
        } else {
          for (int64_t j = 0; j < n; ++j) pd[j] = Pi[j];
        }
        weighted_rows<kD>(pd, vb, C, D, n, acc);
        float* oi = out + (b * T + i) * C + h * D;
        for (int64_t d = 0; d < D; ++d) oi[d] = maybe_bf16<kBf16>(acc[d]);
      }
    }
  }
}

template <int64_t kD, bool kBf16>
void backward_impl(const AttentionShape& shape, const float* q, const float* k, const float* v, const float* probs,
                   const DropoutMask* mask, float rate, const float* dout, float* dq, float* dk, float* dv) {
  const int64_t T = shape.seq, H = shape.heads, D = kD > 0 ? kD : shape.head_dim, C = H * D;
  const int64_t Tp = (T + 7) / 8 * 8;
  const float scale = query_scale<kBf16>(D);
  const float keep_prob = dropout_keep_prob(rate, kBf16);
#pragma omp parallel if (shape.batch * H * T * T >= 32768)
  {
    thread_local std::vector<float> vt_buffer, dk_buffer, dv_buffer, dp_buffer, pd_buffer, ds_buffer;
    float* __restrict vt = scratch(vt_buffer, D * Tp);
    float* __restrict dk_local = scratch(dk_buffer, T * D);
    float* __restrict dv_local = scratch(dv_buffer, T * D);
    float* __restrict dp = scratch(dp_buffer, Tp);
    float* __restrict pd = scratch(pd_buffer, Tp);
    float* __restrict ds = scratch(ds_buffer, Tp);
    alignas(32) float qs[kMaxHeadDim], dqs[kMaxHeadDim], g[kMaxHeadDim];
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < shape.batch * H; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const float* kb = k + b * T * C + h * D;
      const float* vb = v + b * T * C + h * D;
      for (int64_t j = 0; j < T; ++j)
        for (int64_t d = 0; d < D; ++d) vt[d * Tp + j] = vb[j * C + d];
      std::fill(dk_local, dk_local + T * D, 0.0f);
      std::fill(dv_local, dv_local + T * D, 0.0f);
      const float* P = probs + bh * T * T;
      for (int64_t i = 0; i < T; ++i) {
        const int64_t n = i + 1;
        const float* __restrict Pi = P + i * T;
        const float* qi = q + (b * T + i) * C + h * D;
        const float* doi = dout + (b * T + i) * C + h * D;
        for (int64_t d = 0; d < D; ++d) {
          qs[d] = maybe_bf16<kBf16>(qi[d] * scale);
          g[d] = doi[d];
        }
        // Gradient of the dropped probabilities: dout_i . v_j.
        dot_columns<kD>(g, vt, Tp, D, n, dp);
        // Through the dropout: the dropped probabilities as in the forward, and dP.
        if (mask != nullptr) {
          const uint32_t first = static_cast<uint32_t>((bh * T + i) * T), count = static_cast<uint32_t>(n);
          for (uint32_t j = 0; j < count; ++j) {  // 32-bit indices vectorise twice as wide
            const uint32_t index = first + j;
            pd[j] = mask->apply(maybe_bf16<kBf16>(Pi[j] / keep_prob), index);
            dp[j] = mask->apply(dp[j] / keep_prob, index);
          }
        } else {
          for (int64_t j = 0; j < n; ++j) pd[j] = Pi[j];
        }
        // dv_j += pd_j dout_i
        add_outer<kD>(pd, g, D, n, dv_local);
        // Softmax backward: ds_j = P_j (dp_j - sum_l dp_l P_l); dq'_i = sum_j ds_j k_j; dk_j += ds_j q'_i.
        const float dot = dot_product(dp, Pi, n);
        for (int64_t j = 0; j < n; ++j) ds[j] = Pi[j] * (dp[j] - dot);
        weighted_rows<kD>(ds, kb, C, D, n, dqs);
        add_outer<kD>(ds, qs, D, n, dk_local);
        float* dqi = dq + (b * T + i) * C + h * D;
        for (int64_t d = 0; d < D; ++d) dqi[d] = dqs[d] * scale;
      }
      for (int64_t j = 0; j < T; ++j)
        for (int64_t d = 0; d < D; ++d) {
          dk[(b * T + j) * C + h * D + d] = dk_local[j * D + d];
          dv[(b * T + j) * C + h * D + d] = dv_local[j * D + d];
        }
    }
  }
}

}  // namespace

void causal_attention_forward(const AttentionShape& shape, const float* q, const float* k, const float* v,
                              const DropoutMask* mask, float rate, bool bf16, float* probs, float* out) {
  check(shape);
  ops::dispatch_head_dim<0>(shape.head_dim, bf16, [&]<int64_t kD, bool kBf16>() {
    forward_impl<kD, kBf16>(shape, q, k, v, mask, rate, probs, out);
  });
}

void causal_attention_backward(const AttentionShape& shape, const float* q, const float* k, const float* v,
                               const float* probs, const DropoutMask* mask, float rate, bool bf16,
                               const float* dout, float* dq, float* dk, float* dv) {
  check(shape);
  ops::dispatch_head_dim<0>(shape.head_dim, bf16, [&]<int64_t kD, bool kBf16>() {
    backward_impl<kD, kBf16>(shape, q, k, v, probs, mask, rate, dout, dq, dk, dv);
  });
}

}  // namespace fp8kit::ops
