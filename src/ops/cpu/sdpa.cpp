// Grouped-query SDPA on the CPU: tiles of 64 queries x 64 keys, copied to float32 buffers (keys and
// values transposed where a product runs along them), so that every inner loop is a contiguous,
// fixed-length or head_dim-long run the compiler vectorizes. One task per output tile; OpenMP
// hands tasks out dynamically (causal tiles differ in cost), which changes no sum's order.
#include "ops/cpu/sdpa.h"

#include "numerics/cast.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

namespace fp8kit::ops::cpu {

namespace {

constexpr int64_t kTile = 64;  // queries and keys per tile

inline float to_float(float x) { return x; }
inline float to_float(uint16_t x) { return bf16_to_float(x); }

template <typename T>
void store(const float* src, int64_t n, float mul, bool bf16, T* dst) {
  for (int64_t i = 0; i < n; ++i) {
    const float x = src[i] * mul;
    if constexpr (std::is_same_v<T, uint16_t>) {
      dst[i] = float_to_bf16(x);
    } else {
      dst[i] = bf16 ? round_bf16(x) : x;
    }
  }
}

// One head's rows [r0, r0 + rows) of a [batch, seq, heads * D] tensor, times mul, to dst [kTile][D]
// (transposed: dst [D][kTile]); the rows past `rows` are zeros.
template <typename T>
void load_rows(const T* head, int64_t stride, int64_t rows, int64_t D, float mul, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t d = 0; d < D; ++d) dst[r * D + d] = to_float(head[r * stride + d]) * mul;
  }
  std::fill(dst + rows * D, dst + kTile * D, 0.0f);
}
template <typename T>
void load_rows_transposed(const T* head, int64_t stride, int64_t rows, int64_t D, float* dst) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t d = 0; d < D; ++d) dst[d * kTile + r] = to_float(head[r * stride + d]);
  }
  for (int64_t d = 0; d < D; ++d) std::fill(dst + d * kTile + rows, dst + (d + 1) * kTile, 0.0f);
}

// s[i][j] = sum_d a[i][d] bt[d][j] for i < rows, j < kTile (a [rows][D], bt [D][kTile], s [rows][kTile]).
void products(const float* __restrict a, int64_t rows, const float* __restrict bt, int64_t D, float* __restrict s) {
  for (int64_t i = 0; i < rows; ++i) {
    float acc[kTile] = {};
    for (int64_t d = 0; d < D; ++d) {
      const float ad = a[i * D + d];
      const float* __restrict b = bt + d * kTile;
      for (int64_t j = 0; j < kTile; ++j) acc[j] += ad * b[j];
    }
    std::copy(acc, acc + kTile, s + i * kTile);
  }
}

// y[i][d] += sum_{j < cols} w[i][j] x[j][d] for i < rows (w [rows][kTile], x [cols][D], y [rows][D]).
void add_products(const float* __restrict w, int64_t rows, int64_t cols, const float* __restrict x, int64_t D,
                  float* __restrict y) {
  for (int64_t i = 0; i < rows; ++i) {
    float* __restrict yi = y + i * D;
    for (int64_t j = 0; j < cols; ++j) {
      const float wij = w[i * kTile + j];
      const float* __restrict xj = x + j * D;
      for (int64_t d = 0; d < D; ++d) yi[d] += wij * xj[d];
    }
  }
}

// y[j][d] += sum_{i < rows} w[i][j] x[i][d] for j < cols (w [rows][kTile], x [rows][D], y [cols][D]).
void add_products_transposed(const float* __restrict w, int64_t rows, int64_t cols, const float* __restrict x,
                             int64_t D, float* __restrict y) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* __restrict xi = x + i * D;
    for (int64_t j = 0; j < cols; ++j) {
      const float wij = w[i * kTile + j];
      float* __restrict yj = y + j * D;
      for (int64_t d = 0; d < D; ++d) yj[d] += wij * xi[d];
    }
  }
}

// Where one task's tiles live: the element offset of row r of head h in a [batch, seq, heads * D]
// tensor, and how many keys of the tile at j0 query row i (absolute) sees. A sequence of n tokens
// (lengths[b], else seq) has the rows and key tiles of a call with seq = n.
struct Layout {
  const SdpaShape& s;
  const int32_t* lengths = nullptr;
  int64_t tiles = (s.seq + kTile - 1) / kTile;
  int64_t group = s.heads / s.kv_heads;

  int64_t q_offset(int64_t b, int64_t r, int64_t h) const { return ((b * s.seq + r) * s.heads + h) * s.head_dim; }
  int64_t kv_offset(int64_t b, int64_t r, int64_t h) const {
    return ((b * s.seq + r) * s.kv_heads + h) * s.head_dim;
  }
  int64_t length(int64_t b) const { return lengths != nullptr ? lengths[b] : s.seq; }
  // Rows of the tile in a sequence of n (0 for a tile past its end).
  int64_t rows(int64_t tile, int64_t n) const { return std::clamp<int64_t>(n - tile * kTile, 0, kTile); }
  int64_t rows(int64_t tile) const { return rows(tile, s.seq); }
  int64_t visible(int64_t i, int64_t j0, int64_t cols) const {
    return s.causal ? std::clamp<int64_t>(i - j0 + 1, 0, cols) : cols;
  }
  // The key tiles that query tile `it` of a sequence of n sees: [0, last_key_tile].
  int64_t last_key_tile(int64_t it, int64_t n) const { return s.causal ? it : (n + kTile - 1) / kTile - 1; }
  int64_t last_key_tile(int64_t it) const { return last_key_tile(it, s.seq); }
};

// p[i][j] = exp(s[i][j] - lse[i]) for the keys row i0 + i sees, else 0: the probabilities again.
void probabilities(const Layout& L, float* __restrict p, int64_t rows, int64_t i0, int64_t j0, int64_t cols,
                   const float* lse) {
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t n = L.visible(i0 + i, j0, cols);
    float* pi = p + i * kTile;
    for (int64_t j = 0; j < n; ++j) pi[j] = std::exp(pi[j] - lse[i]);
    std::fill(pi + n, pi + kTile, 0.0f);
  }
}

// dp[i][j] becomes ds = p (dp - delta[i]).
void score_gradients(const float* __restrict p, int64_t rows, const float* delta, float* __restrict dp) {
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < kTile; ++j) dp[i * kTile + j] = p[i * kTile + j] * (dp[i * kTile + j] - delta[i]);
  }
}

}  // namespace

template <typename T>
void sdpa_forward(const SdpaShape& s, const T* q, const T* k, const T* v, bool bf16_out, T* out, float* lse,
                  const int32_t* lengths) {
  const Layout L{s, lengths};
  const int64_t D = s.head_dim, tasks = s.batch * s.heads * L.tiles;
#pragma omp parallel
  {
    std::vector<float> qt(kTile * D), kt(kTile * D), vt(kTile * D), p(kTile * kTile), acc(kTile * D);
    std::vector<float> row_max(kTile), sum(kTile);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < tasks; ++task) {
      const int64_t it = task % L.tiles, h = task / L.tiles % s.heads, b = task / L.tiles / s.heads;
      const int64_t n = L.length(b), i0 = it * kTile, rows = L.rows(it, n), kvh = h / L.group;
      for (int64_t i = rows; i < L.rows(it); ++i) {  // padding past the sequence's end
        std::fill_n(out + L.q_offset(b, i0 + i, h), D, T{});
        lse[(b * s.heads + h) * s.seq + i0 + i] = 0.0f;
      }
      if (rows == 0) continue;
      load_rows(q + L.q_offset(b, i0, h), s.heads * D, rows, D, s.scale, qt.data());
      std::fill(row_max.begin(), row_max.end(), -INFINITY);
      std::fill(sum.begin(), sum.end(), 0.0f);
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t jt = 0; jt <= L.last_key_tile(it, n); ++jt) {
        const int64_t j0 = jt * kTile, cols = L.rows(jt, n);
        load_rows_transposed(k + L.kv_offset(b, j0, kvh), s.kv_heads * D, cols, D, kt.data());
        load_rows(v + L.kv_offset(b, j0, kvh), s.kv_heads * D, cols, D, 1.0f, vt.data());
        products(qt.data(), rows, kt.data(), D, p.data());
        // The online softmax: rescale what was summed so far to the new row maximum (every row sees
        // at least one key of every tile it visits).
        for (int64_t i = 0; i < rows; ++i) {
          const int64_t n = L.visible(i0 + i, j0, cols);
          float* pi = p.data() + i * kTile;
          const float m = std::max(row_max[i], *std::max_element(pi, pi + n));
          const float correction = std::exp(row_max[i] - m);
          float row_sum = 0.0f;
          for (int64_t j = 0; j < n; ++j) {
            pi[j] = std::exp(pi[j] - m);
            row_sum += pi[j];
          }
          std::fill(pi + n, pi + kTile, 0.0f);
          if (s.fp8) {  // the FP8 attention's probabilities, as E4M3 codes at scale 448, multiply v (the
                        // row sums above stay the unrounded floats)
            for (int64_t j = 0; j < n; ++j)
              pi[j] = decode_fp8(encode_fp8(pi[j] * kSdpaFp8ProbabilityScale, Fp8Format::E4M3), Fp8Format::E4M3);
          }
          sum[i] = sum[i] * correction + row_sum;
          row_max[i] = m;
          for (int64_t d = 0; d < D; ++d) acc[i * D + d] *= correction;
        }
        add_products(p.data(), rows, cols, vt.data(), D, acc.data());
      }
      for (int64_t i = 0; i < rows; ++i) {
        const float descale = s.fp8 ? 1.0f / kSdpaFp8ProbabilityScale : 1.0f;
        store(acc.data() + i * D, D, descale / sum[i], bf16_out, out + L.q_offset(b, i0 + i, h));
        lse[(b * s.heads + h) * s.seq + i0 + i] = row_max[i] + std::log(sum[i]);
      }
    }
  }
}

template <typename T>
void sdpa_backward(const SdpaShape& s, const T* q, const T* k, const T* v, const T* out, const float* lse,
                   const T* dout, T* dq, T* dk, T* dv) {
  const Layout L{s};
  const int64_t D = s.head_dim, H = s.heads, KH = s.kv_heads;
  std::vector<float> delta(static_cast<size_t>(s.batch * H * s.seq));  // rowsum(dout * out), [batch, heads, seq]
  // Pass 1, per query tile: delta, then dq = scale sum_j ds_ij k_j.
#pragma omp parallel
  {
    std::vector<float> qt(kTile * D), dot(kTile * D), ot(kTile * D), kt(kTile * D), kr(kTile * D), vt(kTile * D);
    std::vector<float> p(kTile * kTile), dp(kTile * kTile), acc(kTile * D);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < s.batch * H * L.tiles; ++task) {
      const int64_t it = task % L.tiles, h = task / L.tiles % H, b = task / L.tiles / H;
      const int64_t i0 = it * kTile, rows = L.rows(it), kvh = h / L.group;
      const float* row_lse = lse + (b * H + h) * s.seq + i0;
      float* row_delta = delta.data() + (b * H + h) * s.seq + i0;
      load_rows(q + L.q_offset(b, i0, h), H * D, rows, D, s.scale, qt.data());
      load_rows(dout + L.q_offset(b, i0, h), H * D, rows, D, 1.0f, dot.data());
      load_rows(out + L.q_offset(b, i0, h), H * D, rows, D, 1.0f, ot.data());
      for (int64_t i = 0; i < rows; ++i) {
        float d_sum = 0.0f;
        for (int64_t d = 0; d < D; ++d) d_sum += dot[i * D + d] * ot[i * D + d];
        row_delta[i] = d_sum;
      }
      std::fill(acc.begin(), acc.end(), 0.0f);
      for (int64_t jt = 0; jt <= L.last_key_tile(it); ++jt) {
        const int64_t j0 = jt * kTile, cols = L.rows(jt);
        load_rows_transposed(k + L.kv_offset(b, j0, kvh), KH * D, cols, D, kt.data());
        load_rows(k + L.kv_offset(b, j0, kvh), KH * D, cols, D, 1.0f, kr.data());
        load_rows_transposed(v + L.kv_offset(b, j0, kvh), KH * D, cols, D, vt.data());
        products(qt.data(), rows, kt.data(), D, p.data());
        probabilities(L, p.data(), rows, i0, j0, cols, row_lse);
        products(dot.data(), rows, vt.data(), D, dp.data());
        score_gradients(p.data(), rows, row_delta, dp.data());
        add_products(dp.data(), rows, cols, kr.data(), D, acc.data());
      }
      for (int64_t i = 0; i < rows; ++i) store(acc.data() + i * D, D, s.scale, false, dq + L.q_offset(b, i0 + i, h));
    }
  }
  // Pass 2, per key tile of a kv head: dv = sum p^T dout, dk = sum ds^T (scale q), over its query heads.
#pragma omp parallel
  {
    std::vector<float> qt(kTile * D), dot(kTile * D), kt(kTile * D), vt(kTile * D);
    std::vector<float> p(kTile * kTile), dp(kTile * kTile), dk_acc(kTile * D), dv_acc(kTile * D);
#pragma omp for schedule(dynamic, 1)
    for (int64_t task = 0; task < s.batch * KH * L.tiles; ++task) {
      const int64_t jt = task % L.tiles, kvh = task / L.tiles % KH, b = task / L.tiles / KH;
      const int64_t j0 = jt * kTile, cols = L.rows(jt);
      load_rows_transposed(k + L.kv_offset(b, j0, kvh), KH * D, cols, D, kt.data());
      load_rows_transposed(v + L.kv_offset(b, j0, kvh), KH * D, cols, D, vt.data());
      std::fill(dk_acc.begin(), dk_acc.end(), 0.0f);
      std::fill(dv_acc.begin(), dv_acc.end(), 0.0f);
      for (int64_t h = kvh * L.group; h < (kvh + 1) * L.group; ++h) {
        for (int64_t it = s.causal ? jt : 0; it < L.tiles; ++it) {
          const int64_t i0 = it * kTile, rows = L.rows(it);
          load_rows(q + L.q_offset(b, i0, h), H * D, rows, D, s.scale, qt.data());
          load_rows(dout + L.q_offset(b, i0, h), H * D, rows, D, 1.0f, dot.data());
          products(qt.data(), rows, kt.data(), D, p.data());
          probabilities(L, p.data(), rows, i0, j0, cols, lse + (b * H + h) * s.seq + i0);
          products(dot.data(), rows, vt.data(), D, dp.data());
          score_gradients(p.data(), rows, delta.data() + (b * H + h) * s.seq + i0, dp.data());
          add_products_transposed(p.data(), rows, cols, dot.data(), D, dv_acc.data());
          add_products_transposed(dp.data(), rows, cols, qt.data(), D, dk_acc.data());
        }
      }
      for (int64_t j = 0; j < cols; ++j) {
        store(dk_acc.data() + j * D, D, 1.0f, false, dk + L.kv_offset(b, j0 + j, kvh));
        store(dv_acc.data() + j * D, D, 1.0f, false, dv + L.kv_offset(b, j0 + j, kvh));
      }
    }
  }
}

template void sdpa_forward<float>(const SdpaShape&, const float*, const float*, const float*, bool, float*, float*,
                                  const int32_t*);
template void sdpa_forward<uint16_t>(const SdpaShape&, const uint16_t*, const uint16_t*, const uint16_t*, bool,
                                     uint16_t*, float*, const int32_t*);
template void sdpa_backward<float>(const SdpaShape&, const float*, const float*, const float*, const float*,
                                   const float*, const float*, float*, float*, float*);
template void sdpa_backward<uint16_t>(const SdpaShape&, const uint16_t*, const uint16_t*, const uint16_t*,
                                      const uint16_t*, const float*, const uint16_t*, uint16_t*, uint16_t*,
                                      uint16_t*);

}  // namespace fp8kit::ops::cpu
