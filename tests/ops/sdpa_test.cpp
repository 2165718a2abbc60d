// Grouped-query SDPA on the CPU against a naive double-precision reference over the full score
// matrix (forward, lse and the analytic backward), over awkward shapes (one query, partial tiles,
// head dims off the vector width, GQA ratios 1, 2, 4, causal or not); the backward also by finite
// differences; bf16 tensors; sequences of different lengths padded to one against each alone; bits
// independent of the thread count; the errors. The FP8 forward (SdpaShape::fp8) against a naive
// reference of its E4M3 steps, and within FP8's error of the exact attention.
#include "ops/sdpa.h"

#include "common/error_of.h"
#include "common/gradient_check.h"
#include "common/host_tensors.h"
#include "numerics/cast.h"
#include "numerics/convert.h"
#include "numerics/scale.h"
#include "ops/context.h"
#include "tensor/tensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace fp8kit::ops {
namespace {

struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

// Softmax(scale q k^T, causal mask) v per query head, its lse, and the gradients for dout, in double.
Reference reference(const SdpaShape& s, const std::vector<float>& q, const std::vector<float>& k,
                    const std::vector<float>& v, const std::vector<float>& dout) {
  const int64_t T = s.seq, H = s.heads, KH = s.kv_heads, D = s.head_dim;
  const double scale = s.scale != 0.0f ? s.scale : 1.0 / std::sqrt(double(D));
  auto qi = [&](int64_t b, int64_t t, int64_t h, int64_t d) { return ((b * T + t) * H + h) * D + d; };
  auto ki = [&](int64_t b, int64_t t, int64_t h, int64_t d) { return ((b * T + t) * KH + h) * D + d; };
  Reference r{std::vector<double>(q.size()), std::vector<double>(s.batch * H * T), std::vector<double>(q.size()),
              std::vector<double>(k.size()), std::vector<double>(k.size())};
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / (H / KH);
      std::vector<double> p(T * T, 0.0), dp(T * T, 0.0);
      for (int64_t i = 0; i < T; ++i) {
        const int64_t n = s.causal ? i + 1 : T;
        double max = -1e300, sum = 0;
        for (int64_t j = 0; j < n; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += double(q[qi(b, i, h, d)]) * k[ki(b, j, g, d)];
          max = std::max(max, p[i * T + j] = scale * dot);
        }
        for (int64_t j = 0; j < n; ++j) sum += (p[i * T + j] = std::exp(p[i * T + j] - max));
        r.lse[(b * H + h) * T + i] = max + std::log(sum);
        double delta = 0;
        for (int64_t j = 0; j < n; ++j) {
          p[i * T + j] /= sum;
          for (int64_t d = 0; d < D; ++d) {
            r.out[qi(b, i, h, d)] += p[i * T + j] * v[ki(b, j, g, d)];
            dp[i * T + j] += double(dout[qi(b, i, h, d)]) * v[ki(b, j, g, d)];
          }
        }
        for (int64_t d = 0; d < D; ++d) delta += double(dout[qi(b, i, h, d)]) * r.out[qi(b, i, h, d)];
        for (int64_t j = 0; j < n; ++j) {
          const double ds = p[i * T + j] * (dp[i * T + j] - delta) * scale;
          for (int64_t d = 0; d < D; ++d) {
            r.dq[qi(b, i, h, d)] += ds * k[ki(b, j, g, d)];
            r.dk[ki(b, j, g, d)] += ds * q[qi(b, i, h, d)];
            r.dv[ki(b, j, g, d)] += p[i * T + j] * dout[qi(b, i, h, d)];
          }
        }
      }
    }
  return r;
}

std::string describe(const SdpaShape& s) {
  return "batch " + std::to_string(s.batch) + " seq " + std::to_string(s.seq) + " heads " + std::to_string(s.heads) +
         "/" + std::to_string(s.kv_heads) + " head_dim " + std::to_string(s.head_dim) +
         (s.causal ? " causal" : " full");
}

// |got - want| <= atol + rtol |want| everywhere.
void expect_close(const std::vector<float>& got, const std::vector<double>& want, double atol, double rtol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], atol + rtol * std::abs(want[i])) << what << " [" << i << "]";
  }
}

const SdpaShape kShapes[] = {
    {.batch = 2, .seq = 1, .heads = 4, .kv_heads = 2, .head_dim = 64},
    {.batch = 1, .seq = 7, .heads = 4, .kv_heads = 1, .head_dim = 128},
    {.batch = 2, .seq = 130, .heads = 2, .kv_heads = 1, .head_dim = 80},
    {.batch = 1, .seq = 130, .heads = 2, .kv_heads = 2, .head_dim = 64, .causal = false},
    {.batch = 1, .seq = 70, .heads = 4, .kv_heads = 1, .head_dim = 5, .causal = false, .scale = 0.3f},
    {.batch = 1, .seq = 200, .heads = 8, .kv_heads = 2, .head_dim = 64},
};

struct Inputs {
  std::vector<float> q, k, v, dout;
  Tensor tq, tk, tv, tdout;
};

// Random q, k, v, dout for s (values rounded to bf16 first when dtype is bf16, so that the
// reference sees what the op reads).
Inputs inputs(const SdpaShape& s, DType dtype, uint64_t seed) {
  const std::vector<int64_t> q_shape = {s.batch, s.seq, s.heads * s.head_dim},
                             kv_shape = {s.batch, s.seq, s.kv_heads * s.head_dim};
  auto values = [&](int64_t n, uint64_t salt, float range) {
    auto x = testing::random_vector(n, seed * 4 + salt, -range, range);
    if (dtype == DType::Bf16) for (float& e : x) e = round_bf16(e);
    return x;
  };
  Inputs in;
  in.q = values(s.batch * s.seq * s.heads * s.head_dim, 0, 2.0f);
  in.k = values(s.batch * s.seq * s.kv_heads * s.head_dim, 1, 2.0f);
  in.v = values(s.batch * s.seq * s.kv_heads * s.head_dim, 2, 1.0f);
  in.dout = values(s.batch * s.seq * s.heads * s.head_dim, 3, 1.0f);
  in.tq = testing::host_tensor(in.q, q_shape, dtype);
  in.tk = testing::host_tensor(in.k, kv_shape, dtype);
  in.tv = testing::host_tensor(in.v, kv_shape, dtype);
  in.tdout = testing::host_tensor(in.dout, q_shape, dtype);
  return in;
}

TEST(Sdpa, MatchesTheFullMatrixReference) {
  Context c;
  for (const SdpaShape& s : kShapes) {
    const Inputs in = inputs(s, DType::F32, 1);
    const Reference r = reference(s, in.q, in.k, in.v, in.dout);
    Tensor out, lse, dq, dk, dv;
    sdpa_forward(c, s, in.tq, in.tk, in.tv, false, out, lse);
    EXPECT_EQ(out.shape(), in.tq.shape());
    EXPECT_EQ(lse.shape(), (std::vector<int64_t>{s.batch, s.heads, s.seq}));
    expect_close(testing::float_values(out), r.out, 2e-6, 1e-5, "out, " + describe(s));
    expect_close(testing::float_values(lse), r.lse, 2e-6, 1e-5, "lse, " + describe(s));
    sdpa_backward(c, s, in.tq, in.tk, in.tv, out, lse, in.tdout, dq, dk, dv);
    EXPECT_EQ(dk.shape(), in.tk.shape());
    expect_close(testing::float_values(dq), r.dq, 1e-5, 1e-4, "dq, " + describe(s));
    expect_close(testing::float_values(dk), r.dk, 1e-5, 1e-4, "dk, " + describe(s));
    expect_close(testing::float_values(dv), r.dv, 1e-5, 1e-4, "dv, " + describe(s));
  }
}

// bf16 tensors are read as floats and written rounded; f32 with bf16_out gives bf16 values.
TEST(Sdpa, Bf16TensorsAndBf16Outputs) {
  Context c;
  for (const SdpaShape& s : kShapes) {
    const Inputs in = inputs(s, DType::Bf16, 2);
    const Reference r = reference(s, in.q, in.k, in.v, in.dout);
    Tensor out, lse, dq, dk, dv;
    sdpa_forward(c, s, in.tq, in.tk, in.tv, false, out, lse);
    EXPECT_EQ(out.dtype(), DType::Bf16);
    expect_close(testing::float_values(out), r.out, 1e-5, 1.0 / 128, "bf16 out, " + describe(s));
    expect_close(testing::float_values(lse), r.lse, 2e-6, 1e-5, "bf16 lse, " + describe(s));
    sdpa_backward(c, s, in.tq, in.tk, in.tv, out, lse, in.tdout, dq, dk, dv);
    EXPECT_EQ(dq.dtype(), DType::Bf16);
    // out was rounded to bf16, so delta = rowsum(dout * out) moves by bf16's rounding of out.
    expect_close(testing::float_values(dq), r.dq, 1e-2, 2e-2, "bf16 dq, " + describe(s));
    expect_close(testing::float_values(dk), r.dk, 1e-2, 2e-2, "bf16 dk, " + describe(s));
    expect_close(testing::float_values(dv), r.dv, 1e-3, 1.0 / 128, "bf16 dv, " + describe(s));

    const Inputs f = inputs(s, DType::F32, 2);
    Tensor out32, rounded;
    sdpa_forward(c, s, f.tq, f.tk, f.tv, false, out32, lse);
    sdpa_forward(c, s, f.tq, f.tk, f.tv, true, rounded, lse);
    const auto exact = testing::float_values(out32), bf16 = testing::float_values(rounded);
    for (size_t i = 0; i < exact.size(); ++i) ASSERT_EQ(bf16[i], round_bf16(exact[i])) << describe(s) << " " << i;
  }
}

// Sequences of different lengths padded to one seq: each the bits of a call on it alone (its first
// lengths[b] rows), its padding rows of out and lse zero, whatever the padding holds.
TEST(Sdpa, LengthsAttendToEachSequenceAsIfAlone) {
  Context c;
  const std::vector<int32_t> n = {130, 1, 70};
  Tensor lengths({3}, DType::I32);
  std::copy(n.begin(), n.end(), lengths.data<int32_t>());
  for (DType dtype : {DType::F32, DType::Bf16}) {
    for (bool causal : {true, false}) {
      const SdpaShape s{.batch = 3, .seq = 130, .heads = 4, .kv_heads = 2, .head_dim = 16, .causal = causal};
      const Inputs in = inputs(s, dtype, 5);
      Tensor out, lse;
      sdpa_forward(c, s, in.tq, in.tk, in.tv, false, out, lse, &lengths);
      const std::vector<float> got = testing::float_values(out), got_lse = testing::float_values(lse);
      const int64_t qw = s.heads * s.head_dim, kw = s.kv_heads * s.head_dim;
      for (int64_t b = 0; b < s.batch; ++b) {
        const int64_t len = n[static_cast<size_t>(b)];
        SdpaShape alone = s;
        alone.batch = 1;
        alone.seq = len;
        auto rows = [&](const std::vector<float>& x, int64_t width) {
          const auto first = x.begin() + b * s.seq * width;
          return testing::host_tensor(std::vector<float>(first, first + len * width), {1, len, width}, dtype);
        };
        Tensor want, want_lse;
        sdpa_forward(c, alone, rows(in.q, qw), rows(in.k, kw), rows(in.v, kw), false, want, want_lse);
        const std::vector<float> w = testing::float_values(want), w_lse = testing::float_values(want_lse);
        const std::string what = describe(s) + " " + std::string(name(dtype)) + ", sequence " + std::to_string(b);
        const auto out_b = got.begin() + b * s.seq * qw;
        EXPECT_EQ(std::vector<float>(out_b, out_b + len * qw), w) << what;
        EXPECT_EQ(std::vector<float>(out_b + len * qw, out_b + s.seq * qw), std::vector<float>((s.seq - len) * qw))
            << what;
        for (int64_t h = 0; h < s.heads; ++h) {
          const auto lse_bh = got_lse.begin() + (b * s.heads + h) * s.seq;
          EXPECT_EQ(std::vector<float>(lse_bh, lse_bh + len), std::vector<float>(w_lse.begin() + h * len,
                                                                                 w_lse.begin() + (h + 1) * len))
              << what << " head " << h;
          EXPECT_EQ(std::vector<float>(lse_bh + len, lse_bh + s.seq), std::vector<float>(s.seq - len)) << what;
        }
      }
    }
  }
}

TEST(Sdpa, BackwardMatchesFiniteDifferences) {
  Context c;
  for (const SdpaShape& s : {SdpaShape{.batch = 1, .seq = 9, .heads = 4, .kv_heads = 2, .head_dim = 8},
                             SdpaShape{.batch = 2, .seq = 5, .heads = 2, .kv_heads = 1, .head_dim = 6,
                                       .causal = false, .scale = 0.7f}}) {
    Inputs in = inputs(s, DType::F32, 3);
    Tensor out, lse, dq, dk, dv;
    sdpa_forward(c, s, in.tq, in.tk, in.tv, false, out, lse);
    sdpa_backward(c, s, in.tq, in.tk, in.tv, out, lse, in.tdout, dq, dk, dv);
    auto check = [&](Tensor& x, const Tensor& grad, const std::string& what) {
      auto loss = [&] {
        Tensor o, l;
        sdpa_forward(c, s, in.tq, in.tk, in.tv, false, o, l);
        return testing::probe(o.span<float>(), in.dout);
      };
      testing::expect_gradient_close(x.span<float>(), grad.span<float>(), loss, 1e-2, 2e-4, 2e-3,
                                     what + ", " + describe(s));
    };
    check(in.tq, dq, "dq");
    check(in.tk, dk, "dk");
    check(in.tv, dv, "dv");
  }
}

TEST(Sdpa, BitsDoNotDependOnTheThreadCount) {
  Context c;
  const SdpaShape s{.batch = 2, .seq = 150, .heads = 4, .kv_heads = 2, .head_dim = 32};
  const Inputs in = inputs(s, DType::F32, 4);
  auto run = [&](int threads) {
    const int saved = omp_get_max_threads();
    omp_set_num_threads(threads);
    Tensor out, lse, dq, dk, dv;
    sdpa_forward(c, s, in.tq, in.tk, in.tv, false, out, lse);
    sdpa_backward(c, s, in.tq, in.tk, in.tv, out, lse, in.tdout, dq, dk, dv);
    omp_set_num_threads(saved);
    std::vector<float> all;
    for (const Tensor* t : {&out, &lse, &dq, &dk, &dv}) all.insert(all.end(), t->span<float>().begin(), t->span<float>().end());
    return all;
  };
  const std::vector<float> one = run(1), three = run(3);
  ASSERT_EQ(one.size(), three.size());
  EXPECT_EQ(std::memcmp(one.data(), three.data(), one.size() * sizeof(float)), 0);
}

TEST(Sdpa, ErrorsNameTheOpTheTensorAndTheFix) {
  using ::testing::HasSubstr;
  using testing::error_of;
  Context c;
  const SdpaShape s{.batch = 2, .seq = 3, .heads = 4, .kv_heads = 2, .head_dim = 4};
  const Tensor q({2, 3, 16}, DType::F32), k({2, 3, 8}, DType::F32), v({2, 3, 8}, DType::F32);
  Tensor out, lse;
  EXPECT_THAT(error_of([&] { sdpa_forward(c, {.batch = 2, .seq = 3, .heads = 4, .kv_heads = 3, .head_dim = 4}, q, k,
                                          v, false, out, lse); }),
              HasSubstr("sdpa_forward: kv_heads 3 must divide heads 4"));
  EXPECT_THAT(error_of([&] { sdpa_forward(c, s, q, q, v, false, out, lse); }),
              HasSubstr("sdpa_forward: k (q's dtype) must be [2, 3, 8], got [2, 3, 16]"));
  EXPECT_THAT(error_of([&] { sdpa_forward(c, s, q, k, Tensor({2, 3, 8}, DType::Bf16), false, out, lse); }),
              HasSubstr("sdpa_forward: v (q's dtype) must be f32, got bf16"));
  EXPECT_THAT(error_of([&] {
                sdpa_forward(c, {.batch = 1, .seq = 3, .heads = 1, .kv_heads = 1, .head_dim = 300},
                             Tensor({1, 3, 300}, DType::F32), Tensor({1, 3, 300}, DType::F32),
                             Tensor({1, 3, 300}, DType::F32), false, out, lse);
              }),
              HasSubstr("sdpa_forward: head_dim 300 is above the supported 256"));
  EXPECT_THAT(error_of([&] { sdpa_forward(c, s, Tensor({2, 3, 16}, DType::I32), k, v, false, out, lse); }),
              HasSubstr("sdpa_forward: q must be f32 or bf16, got i32"));
  Tensor lengths({2}, DType::I32);
  lengths.data<int32_t>()[0] = 3;
  EXPECT_THAT(error_of([&] { sdpa_forward(c, s, q, k, v, false, out, lse, &lengths); }),
              HasSubstr("sdpa_forward: lengths[1] = 0 is outside [1, seq = 3]"));
  SdpaShape fp8 = s;
  fp8.fp8 = true;
  lengths.data<int32_t>()[1] = 2;
  EXPECT_THAT(error_of([&] { sdpa_forward(c, fp8, q, k, v, false, out, lse, &lengths); }),
              HasSubstr("sdpa_forward: FP8 attention takes no lengths: run padded batches in bf16"));
  const Tensor three({3}, DType::I32);
  EXPECT_THAT(error_of([&] { sdpa_forward(c, s, q, k, v, false, out, lse, &three); }),
              HasSubstr("sdpa_forward: lengths must be [2], got [3]"));
  sdpa_forward(c, s, q, k, v, false, out, lse);
  Tensor dq, dk, dv;
  EXPECT_THAT(error_of([&] { sdpa_backward(c, s, q, k, v, out, Tensor({2, 3, 4}, DType::F32), q, dq, dk, dv); }),
              HasSubstr("sdpa_backward: lse (the forward's) must be [2, 4, 3], got [2, 3, 4]"));
  sdpa_backward(c, s, q, k, v, out, lse, q, dq, dk, dv);
  EXPECT_EQ(dv.shape(), (std::vector<int64_t>{2, 3, 8}));
}

// x's E4M3 codes' values at its current per-tensor scale, and the scale.
std::vector<float> e4m3_values(const std::vector<float>& x, float& scale) {
  scale = current_scale(amax(x), Fp8Format::E4M3);
  std::vector<uint8_t> codes(x.size());
  quantize_fp8(x, scale, Fp8Format::E4M3, codes);
  std::vector<float> values(x.size());
  for (size_t i = 0; i < x.size(); ++i) values[i] = decode_fp8(codes[i], Fp8Format::E4M3);
  return values;
}

float e4m3_round(float x) { return decode_fp8(encode_fp8(x, Fp8Format::E4M3), Fp8Format::E4M3); }

// Within one tile of keys (seq <= 64, where the running maximum is the row's), each step of the FP8
// forward as ops/sdpa.h states it, naively: scores of the codes in double, probabilities to E4M3 at
// 448, out to E4M3 at v's scale x 15/16, dequantized to bf16.
TEST(SdpaFp8, IsTheAttentionOfItsE4m3Operands) {
  Context c;
  for (SdpaShape s : {SdpaShape{.batch = 2, .seq = 37, .heads = 4, .kv_heads = 2, .head_dim = 32},
                      SdpaShape{.batch = 1, .seq = 64, .heads = 2, .kv_heads = 1, .head_dim = 16, .causal = false}}) {
    s.fp8 = true;
    for (DType dtype : {DType::F32, DType::Bf16}) {
      const Inputs in = inputs(s, dtype, 6);
      float sq = 0, sk = 0, sv = 0;
      const std::vector<float> q = e4m3_values(in.q, sq), k = e4m3_values(in.k, sk), v = e4m3_values(in.v, sv);
      const float scale_o = sv * kSdpaFp8OutScale, descale_o = 1.0f / scale_o;
      const int64_t T = s.seq, H = s.heads, KH = s.kv_heads, D = s.head_dim;
      const double scale = 1.0 / std::sqrt(double(D)) / sq / sk;
      std::vector<double> want(q.size()), want_lse(s.batch * H * T);
      for (int64_t b = 0; b < s.batch; ++b)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t i = 0; i < T; ++i) {
            const int64_t g = h / (H / KH), n = s.causal ? i + 1 : T;
            std::vector<double> p(n);
            for (int64_t j = 0; j < n; ++j) {
              double dot = 0;
              for (int64_t d = 0; d < D; ++d)
                dot += double(q[((b * T + i) * H + h) * D + d]) * k[((b * T + j) * KH + g) * D + d];
              p[j] = scale * dot;
            }
            const double max = *std::max_element(p.begin(), p.end());
            double sum = 0;
            for (double& e : p) sum += (e = std::exp(e - max));
            want_lse[(b * H + h) * T + i] = max + std::log(sum);
            for (int64_t d = 0; d < D; ++d) {
              double o = 0;
              for (int64_t j = 0; j < n; ++j)
                o += e4m3_round(static_cast<float>(p[j]) * kSdpaFp8ProbabilityScale) *
                     double(v[((b * T + j) * KH + g) * D + d]);
              o = o / (kSdpaFp8ProbabilityScale * sum) / sv;
              want[((b * T + i) * H + h) * D + d] = round_bf16(e4m3_round(static_cast<float>(o) * scale_o) * descale_o);
            }
          }
      Tensor out, lse;
      sdpa_forward(c, s, in.tq, in.tk, in.tv, false, out, lse);
      const std::vector<float> got = testing::float_values(out);
      for (float x : got) ASSERT_EQ(x, round_bf16(x)) << "out holds bf16 values";
      // Float against double sums may round a value across an E4M3 boundary: one step apart at most.
      expect_close(got, want, descale_o / 512, 0.13, "fp8 out, " + describe(s));
      expect_close(testing::float_values(lse), want_lse, 2e-6, 1e-5, "fp8 lse, " + describe(s));
      size_t differ = 0;
      for (size_t i = 0; i < got.size(); ++i) differ += std::abs(got[i] - want[i]) > 1e-6 * std::abs(want[i]);
      EXPECT_LE(differ, got.size() / 100) << "values an E4M3 step from the reference, " << describe(s);
    }
  }
}

// Over several tiles of keys: within FP8's error of the exact attention (E4M3 keeps 3 mantissa
// bits: a relative rounding error up to 2^-4, about 3.6% RMS, at each of q, k, the probabilities, v
// and out; scores of |q|, |k| <= 2 move by up to 0.1), and not the bf16 attention's values.
TEST(SdpaFp8, IsWithinFp8sErrorOfTheExactAttention) {
  Context c;
  for (SdpaShape s : {SdpaShape{.batch = 2, .seq = 130, .heads = 2, .kv_heads = 1, .head_dim = 64},
                      SdpaShape{.batch = 1, .seq = 200, .heads = 8, .kv_heads = 2, .head_dim = 32, .causal = false}}) {
    const Inputs in = inputs(s, DType::Bf16, 7);
    const Reference r = reference(s, in.q, in.k, in.v, in.dout);
    Tensor exact, out, lse;
    sdpa_forward(c, s, in.tq, in.tk, in.tv, false, exact, lse);
    s.fp8 = true;
    sdpa_forward(c, s, in.tq, in.tk, in.tv, false, out, lse);
    const std::vector<float> got = testing::float_values(out), bf16 = testing::float_values(exact);
    double error = 0, norm = 0, from_bf16 = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      error += (got[i] - r.out[i]) * (got[i] - r.out[i]);
      norm += r.out[i] * r.out[i];
      from_bf16 += std::abs(got[i] - bf16[i]);
    }
    EXPECT_LT(std::sqrt(error / norm), 0.08) << describe(s);
    EXPECT_GT(from_bf16, 0.0) << describe(s);
    expect_close(testing::float_values(lse), r.lse, 0.1, 0.01, "fp8 lse, " + describe(s));
  }
}

// The FP8 forward's backward is bf16's: fp8 changes no gradient bit.
TEST(SdpaFp8, TheBackwardIsBf16s) {
  Context c;
  SdpaShape s{.batch = 1, .seq = 70, .heads = 4, .kv_heads = 2, .head_dim = 16};
  const Inputs in = inputs(s, DType::Bf16, 8);
  s.fp8 = true;
  Tensor out, lse, dq[2], dk[2], dv[2];
  sdpa_forward(c, s, in.tq, in.tk, in.tv, false, out, lse);
  for (int fp8 = 0; fp8 < 2; ++fp8) {
    s.fp8 = fp8 != 0;
    sdpa_backward(c, s, in.tq, in.tk, in.tv, out, lse, in.tdout, dq[fp8], dk[fp8], dv[fp8]);
  }
  EXPECT_EQ(testing::float_values(dq[0]), testing::float_values(dq[1]));
  EXPECT_EQ(testing::float_values(dk[0]), testing::float_values(dk[1]));
  EXPECT_EQ(testing::float_values(dv[0]), testing::float_values(dv[1]));
}

}  // namespace
}  // namespace fp8kit::ops
