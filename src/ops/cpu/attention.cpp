// Causal attention forward/backward, one (batch, head) pair per task across the OpenMP threads.
// Only the causal lower triangle is computed (see ops/attention.h for why that is exact).
#include "ops/attention.h"

#include "base/error.h"
#include "numerics/cast.h"

#include <cmath>
#include <vector>

namespace fp8kit::ops {

namespace {

inline float maybe_bf16(float x, bool bf16) { return bf16 ? round_bf16(x) : x; }

void check(const AttentionShape& s) {
  FP8KIT_CHECK(s.batch >= 0 && s.seq > 0 && s.heads > 0 && s.head_dim > 0,
               "attention shape must be positive: batch {} seq {} heads {} head_dim {}", s.batch, s.seq, s.heads,
               s.head_dim);
  FP8KIT_CHECK(s.batch * s.heads * s.seq * s.seq <= int64_t{UINT32_MAX},
               "attention probabilities are limited to 2^32 elements (dropout indices)");
}

// Dropped probabilities of row i: pd[j] = keep ? p[j] / keep_prob : 0 (rounded like the forward).
inline void drop_row(const DropoutMask* mask, uint32_t first_index, int64_t n, const float* p, float keep_prob,
                     bool bf16, float* pd) {
  if (mask == nullptr) {
    for (int64_t j = 0; j < n; ++j) pd[j] = p[j];
    return;
  }
  for (int64_t j = 0; j < n; ++j) {
    const float dropped = maybe_bf16(p[j] / keep_prob, bf16);
    pd[j] = mask->keep(first_index + static_cast<uint32_t>(j)) ? dropped : 0.0f;
  }
}

}  // namespace

void causal_attention_forward(const AttentionShape& shape, const float* q, const float* k, const float* v,
                              const DropoutMask* mask, float rate, bool bf16, float* probs, float* out) {
  check(shape);
  const int64_t T = shape.seq, H = shape.heads, D = shape.head_dim, C = H * D;
  // Keras multiplies q by 1 / sqrt(key_dim) in the compute dtype (0.25 for 16: exact).
  const float scale = maybe_bf16(static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))), bf16);
  const float keep_prob = dropout_keep_prob(rate, bf16);
#pragma omp parallel
  {
    std::vector<float> kt(static_cast<size_t>(D * T)), row(static_cast<size_t>(T)), pd(static_cast<size_t>(T)),
        qs(static_cast<size_t>(D)), acc(static_cast<size_t>(D));
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < shape.batch * H; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const float* kb = k + b * T * C + h * D;
      const float* vb = v + b * T * C + h * D;
      for (int64_t j = 0; j < T; ++j)
        for (int64_t d = 0; d < D; ++d) kt[d * T + j] = kb[j * C + d];
      float* P = probs + bh * T * T;
      for (int64_t i = 0; i < T; ++i) {
        const float* qi = q + (b * T + i) * C + h * D;
        for (int64_t d = 0; d < D; ++d) qs[d] = maybe_bf16(qi[d] * scale, bf16);
        const int64_t n = i + 1;  // keys 0..i
        float* s = row.data();
        for (int64_t j = 0; j < n; ++j) s[j] = 0.0f;
        for (int64_t d = 0; d < D; ++d) {
          const float qd = qs[d];
          const float* kd = kt.data() + d * T;
          for (int64_t j = 0; j < n; ++j) s[j] += qd * kd[j];
        }
        float max = -INFINITY;
        for (int64_t j = 0; j < n; ++j) {
          s[j] = maybe_bf16(s[j], bf16);
          max = std::max(max, s[j]);
        }
        float sum = 0.0f;
        for (int64_t j = 0; j < n; ++j) {
          s[j] = std::exp(s[j] - max);
          sum += s[j];
        }
        float* Pi = P + i * T;
        for (int64_t j = 0; j < n; ++j) Pi[j] = maybe_bf16(s[j] / sum, bf16);
        drop_row(mask, static_cast<uint32_t>((bh * T + i) * T), n, Pi, keep_prob, bf16, pd.data());
        for (int64_t d = 0; d < D; ++d) acc[d] = 0.0f;
        for (int64_t j = 0; j < n; ++j) {
          const float p = pd[j];
          const float* vj = vb + j * C;
          for (int64_t d = 0; d < D; ++d) acc[d] += p * vj[d];
        }
        float* oi = out + (b * T + i) * C + h * D;
        for (int64_t d = 0; d < D; ++d) oi[d] = maybe_bf16(acc[d], bf16);
      }
    }
  }
}

void causal_attention_backward(const AttentionShape& shape, const float* q, const float* k, const float* v,
                               const float* probs, const DropoutMask* mask, float rate, bool bf16,
                               const float* dout, float* dq, float* dk, float* dv) {
  check(shape);
  const int64_t T = shape.seq, H = shape.heads, D = shape.head_dim, C = H * D;
  const float scale = maybe_bf16(static_cast<float>(1.0 / std::sqrt(static_cast<double>(D))), bf16);
  const float keep_prob = dropout_keep_prob(rate, bf16);
#pragma omp parallel
  {
    std::vector<float> vt(static_cast<size_t>(D * T)), dk_local(static_cast<size_t>(T * D)),
        dv_local(static_cast<size_t>(T * D)), dp(static_cast<size_t>(T)), pd(static_cast<size_t>(T)),
        qs(static_cast<size_t>(D)), dqs(static_cast<size_t>(D));
#pragma omp for schedule(dynamic, 1)
    for (int64_t bh = 0; bh < shape.batch * H; ++bh) {
      const int64_t b = bh / H, h = bh % H;
      const float* kb = k + b * T * C + h * D;
      const float* vb = v + b * T * C + h * D;
      for (int64_t j = 0; j < T; ++j)
        for (int64_t d = 0; d < D; ++d) vt[d * T + j] = vb[j * C + d];
      std::fill(dk_local.begin(), dk_local.end(), 0.0f);
      std::fill(dv_local.begin(), dv_local.end(), 0.0f);
      const float* P = probs + bh * T * T;
      for (int64_t i = 0; i < T; ++i) {
        const int64_t n = i + 1;
        const float* Pi = P + i * T;
        const float* doi = dout + (b * T + i) * C + h * D;
        const float* qi = q + (b * T + i) * C + h * D;
        for (int64_t d = 0; d < D; ++d) qs[d] = maybe_bf16(qi[d] * scale, bf16);
        // Gradient of the dropped probabilities: dout_i . v_j.
        for (int64_t j = 0; j < n; ++j) dp[j] = 0.0f;
        for (int64_t d = 0; d < D; ++d) {
          const float g = doi[d];
          const float* vd = vt.data() + d * T;
          for (int64_t j = 0; j < n; ++j) dp[j] += g * vd[j];
        }
        drop_row(mask, static_cast<uint32_t>((bh * T + i) * T), n, Pi, keep_prob, bf16, pd.data());
        if (mask != nullptr) {
          const uint32_t first = static_cast<uint32_t>((bh * T + i) * T);
          for (int64_t j = 0; j < n; ++j) dp[j] = mask->keep(first + static_cast<uint32_t>(j)) ? dp[j] / keep_prob : 0.0f;
        }
        // dv_j += pd_j dout_i
        for (int64_t j = 0; j < n; ++j) {
          const float p = pd[j];
          float* dvj = dv_local.data() + j * D;
          for (int64_t d = 0; d < D; ++d) dvj[d] += p * doi[d];
        }
        // Softmax backward: ds_j = P_j (dp_j - sum_l dp_l P_l).
        float dot = 0.0f;
        for (int64_t j = 0; j < n; ++j) dot += dp[j] * Pi[j];
        for (int64_t d = 0; d < D; ++d) dqs[d] = 0.0f;
        for (int64_t j = 0; j < n; ++j) {
          const float ds = Pi[j] * (dp[j] - dot);
          const float* kj = kb + j * C;
          float* dkj = dk_local.data() + j * D;
          for (int64_t d = 0; d < D; ++d) {
            dqs[d] += ds * kj[d];
            dkj[d] += ds * qs[d];
          }
        }
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

}  // namespace fp8kit::ops
