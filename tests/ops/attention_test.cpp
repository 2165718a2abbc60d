// Causal attention against a naive reference that masks with -1e9 over the full score matrix (so
// skipping the masked triangle is checked too), in float32 and bf16, with and without dropout;
// the backward by finite differences.
#include "ops/attention.h"

#include "common/error_of.h"
#include "common/gradient_check.h"
#include "common/host_tensors.h"
#include "numerics/cast.h"
#include "ops/context.h"
#include "tensor/tensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace fp8kit::ops {
namespace {

// Keras semantics in double: scores + (-1e9 where j > i), softmax over all keys, dropout, @ v.
std::vector<double> reference(const AttentionShape& s, const std::vector<float>& q, const std::vector<float>& k,
                              const std::vector<float>& v, const DropoutMask* mask, float rate) {
  const int64_t T = s.seq, H = s.heads, D = s.head_dim, C = H * D;
  std::vector<double> out(s.batch * T * C, 0.0);
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        std::vector<double> sc(T);
        double max = -1e300;
        for (int64_t j = 0; j < T; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += q[(b * T + i) * C + h * D + d] / std::sqrt(double(D)) * k[(b * T + j) * C + h * D + d];
          sc[j] = dot + (j > i ? -1e9 : 0.0);
          max = std::max(max, sc[j]);
        }
        double sum = 0;
        for (double& x : sc) sum += (x = std::exp(x - max));
        for (int64_t j = 0; j < T; ++j) {
          double p = sc[j] / sum;
          if (mask) {
            const auto index = static_cast<uint32_t>((((b * H + h) * T) + i) * T + j);
            p = mask->keep(index) ? p / (1.0 - rate) : 0.0;
          }
          for (int64_t d = 0; d < D; ++d) out[(b * T + i) * C + h * D + d] += p * v[(b * T + j) * C + h * D + d];
        }
      }
  return out;
}

struct Case {
  AttentionShape shape;
  bool dropout;
};
const Case kCases[] = {{{2, 7, 2, 16}, false}, {{2, 13, 2, 16}, true}, {{1, 9, 3, 5}, true}, {{3, 1, 1, 8}, false},
                       {{1, 20, 1, 32}, true}};

TEST(CausalAttention, ForwardMatchesFullMaskedReference) {
  for (const Case& c : kCases) {
    const AttentionShape& s = c.shape;
    const int64_t n = s.batch * s.seq * s.heads * s.head_dim;
    const auto q = testing::random_vector(n, 1, -2, 2), k = testing::random_vector(n, 2, -2, 2),
               v = testing::random_vector(n, 3);
    const DropoutMask mask(9, 4, 1, 0.1f);
    const DropoutMask* m = c.dropout ? &mask : nullptr;
    std::vector<float> probs(s.batch * s.heads * s.seq * s.seq), out(n);
    causal_attention_forward(s, q.data(), k.data(), v.data(), m, 0.1f, false, probs.data(), out.data());
    const auto expected = reference(s, q, k, v, m, 0.1f);
    for (int64_t i = 0; i < n; ++i) ASSERT_NEAR(out[i], expected[i], 2e-6 * (1 + s.seq)) << i;
    for (int64_t bh = 0; bh < s.batch * s.heads; ++bh)
      for (int64_t i = 0; i < s.seq; ++i) {
        double row = 0;
        for (int64_t j = 0; j < s.seq; ++j) {
          const float p = probs[(bh * s.seq + i) * s.seq + j];
          if (j > i) {
            ASSERT_EQ(p, 0.0f);
          }
          row += p;
        }
        ASSERT_NEAR(row, 1.0, 1e-5);
      }

    // bf16: outputs are bf16 values within bf16 rounding of the float32 result.
    std::vector<float> out16(n);
    causal_attention_forward(s, q.data(), k.data(), v.data(), m, 0.1f, true, probs.data(), out16.data());
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(out16[i], round_bf16(out16[i]));
      ASSERT_NEAR(out16[i], out[i], 0.05 * (1 + std::abs(out[i]))) << i;
    }
  }
}

TEST(CausalAttention, BackwardMatchesFiniteDifferences) {
  for (const Case& c : kCases) {
    const AttentionShape& s = c.shape;
    const int64_t n = s.batch * s.seq * s.heads * s.head_dim;
    auto q = testing::random_vector(n, 4), k = testing::random_vector(n, 5), v = testing::random_vector(n, 6);
    const auto w = testing::random_vector(n, 7);  // probe: loss = sum(out * w)
    const DropoutMask mask(3, 2, 1, 0.1f);
    const DropoutMask* m = c.dropout ? &mask : nullptr;
    std::vector<float> probs(s.batch * s.heads * s.seq * s.seq), out(n), dq(n), dk(n), dv(n);
    causal_attention_forward(s, q.data(), k.data(), v.data(), m, 0.1f, false, probs.data(), out.data());
    causal_attention_backward(s, q.data(), k.data(), v.data(), probs.data(), m, 0.1f, false, w.data(), dq.data(),
                              dk.data(), dv.data());
    auto loss = [&] {
      causal_attention_forward(s, q.data(), k.data(), v.data(), m, 0.1f, false, probs.data(), out.data());
      return testing::probe(out, w);
    };
    testing::expect_gradient_close(q, dq, loss, 1e-2, 2e-4, 2e-3, "dq");
    testing::expect_gradient_close(k, dk, loss, 1e-2, 2e-4, 2e-3, "dk");
    testing::expect_gradient_close(v, dv, loss, 1e-2, 2e-4, 2e-3, "dv");
  }
}

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

// The Tensor op on a CPU context is the pointer-level core with the context's dropout mask (seed,
// step, site), saving the probabilities; bit for bit, forward and backward.
TEST(CausalAttentionOp, IsTheCoreWithTheContextsMask) {
  for (const Case& c : kCases) {
    const AttentionShape& s = c.shape;
    const int64_t n = s.batch * s.seq * s.heads * s.head_dim;
    const std::vector<int64_t> rows = {s.batch, s.seq, s.heads * s.head_dim};
    const auto q = testing::random_vector(n, 1, -2, 2), k = testing::random_vector(n, 2, -2, 2),
               v = testing::random_vector(n, 3), dout = testing::random_vector(n, 4);
    const Tensor tq = testing::host_tensor(q, rows), tk = testing::host_tensor(k, rows),
                 tv = testing::host_tensor(v, rows), tdout = testing::host_tensor(dout, rows);
    Context ctx(Device::Cpu, 9);
    ctx.set_step(4);
    const DropoutMask mask(9, 4, 1, 0.1f);
    const DropoutMask* m = c.dropout ? &mask : nullptr;
    for (const bool bf16 : {false, true}) {
      std::vector<float> probs(s.batch * s.heads * s.seq * s.seq), out(n), dq(n), dk(n), dv(n);
      causal_attention_forward(s, q.data(), k.data(), v.data(), m, 0.1f, bf16, probs.data(), out.data());
      causal_attention_backward(s, q.data(), k.data(), v.data(), probs.data(), m, 0.1f, bf16, dout.data(), dq.data(),
                                dk.data(), dv.data());
      Tensor saved, tout, tdq, tdk, tdv;
      const DropoutSpec spec{1, 0.1f, c.dropout};
      causal_attention_forward(ctx, tq, tk, tv, s, spec, bf16, saved, tout);
      EXPECT_EQ(saved.shape(), (std::vector<int64_t>{s.batch, s.heads, s.seq, s.seq}));
      EXPECT_TRUE(same_bits(tout.span<float>(), out)) << "bf16 " << bf16;
      causal_attention_backward(ctx, tq, tk, tv, saved, spec, bf16, tdout, tdq, tdk, tdv);
      EXPECT_TRUE(same_bits(tdq.span<float>(), dq)) << "bf16 " << bf16;
      EXPECT_TRUE(same_bits(tdk.span<float>(), dk)) << "bf16 " << bf16;
      EXPECT_TRUE(same_bits(tdv.span<float>(), dv)) << "bf16 " << bf16;
    }
  }
}

TEST(CausalAttentionOp, ErrorsNameTheOpTheTensorAndTheFix) {
  using ::testing::HasSubstr;
  using testing::error_of;
  Context c;
  const AttentionShape s{2, 3, 2, 4};
  const Tensor q({2, 3, 8}, DType::F32), k({2, 3, 8}, DType::F32), v({2, 3, 8}, DType::F32);
  const Tensor short_k({2, 4, 8}, DType::F32), bf16_v({2, 3, 8}, DType::Bf16);
  Tensor saved, out;
  EXPECT_THAT(error_of([&] { causal_attention_forward(c, q, short_k, v, s, {}, false, saved, out); }),
              HasSubstr("causal_attention_forward: k must be [2, 3, 8], got [2, 4, 8]"));
  EXPECT_THAT(error_of([&] { causal_attention_forward(c, q, k, v, {2, 3, 4, 4}, {}, false, saved, out); }),
              HasSubstr("causal_attention_forward: q must be [2, 3, 16], got [2, 3, 8]"));
  EXPECT_THAT(error_of([&] { causal_attention_forward(c, q, k, bf16_v, s, {}, false, saved, out); }),
              HasSubstr("causal_attention_forward: v must be f32, got bf16"));
  EXPECT_THAT(error_of([&] { causal_attention_forward(c, q, k, v, {2, 0, 2, 4}, {}, false, saved, out); }),
              HasSubstr("causal_attention_forward: shape must be positive"));
  causal_attention_forward(c, q, k, v, s, {}, false, saved, out);
  Tensor dq, dk, dv;
  const Tensor dout({2, 3, 8}, DType::F32);
  EXPECT_THAT(error_of([&] {
                causal_attention_backward(c, q, k, v, Tensor({2, 2, 3, 2}, DType::F32), {}, false, dout, dq, dk, dv);
              }),
              HasSubstr("causal_attention_backward: saved (the forward's probabilities on the CPU) must be "
                        "[2, 2, 3, 3], got [2, 2, 3, 2]"));
  EXPECT_THAT(error_of([&] {
                causal_attention_backward(c, q, k, v, Tensor({2, 3, 3}, DType::F32), {}, false, dout, dq, dk, dv);
              }),
              HasSubstr("causal_attention_backward: q must be [batch, seq, heads * head_dim] and saved [batch, heads, "
                        "seq, seq] (the forward's)"));
  EXPECT_THAT(error_of([&] {
                causal_attention_backward(c, q, k, v, saved, {}, false, Tensor({2, 3, 4}, DType::F32), dq, dk, dv);
              }),
              HasSubstr("causal_attention_backward: dout must be [2, 3, 8], got [2, 3, 4]"));
  causal_attention_backward(c, q, k, v, saved, {}, false, dout, dq, dk, dv);
  EXPECT_EQ(dv.shape(), (std::vector<int64_t>{2, 3, 8}));
}

}  // namespace
}  // namespace fp8kit::ops
