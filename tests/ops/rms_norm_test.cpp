// RMSNorm's CPU core against a double reference (eps inside the sqrt, HF's out = (x rstd) weight), bf16
// rounding of the output, its backward by finite differences and dweight against a double sum (the
// same bits at any thread count); the op on Tensors: the core's bits and its argument errors.
#include "ops/rms_norm.h"

#include "common/activation_out_checks.h"
#include "common/error_of.h"
#include "common/gradient_check.h"
#include "cpu_op_test.h"
#include "numerics/cast.h"
#include "ops/cpu/rms_norm.h"
#include "ops/elementwise.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

namespace fp8kit::ops {
namespace {

struct Shape {
  int64_t rows, dim;
};

TEST(RmsNorm, ForwardMatchesReference) {
  for (const Shape s : {Shape{1, 1}, Shape{1, 5}, Shape{37, 33}, Shape{600, 64}}) {
    const auto x = testing::random_vector(s.rows * s.dim, 1, -3, 5);
    const auto weight = testing::random_vector(s.dim, 2, 0.5f, 1.5f);
    std::vector<float> out(x.size()), out16(x.size()), rstd(s.rows);
    cpu::rms_norm_forward(s.rows, s.dim, 1e-6f, x.data(), weight.data(), false, out.data(), rstd.data());
    cpu::rms_norm_forward(s.rows, s.dim, 1e-6f, x.data(), weight.data(), true, out16.data(), rstd.data());
    for (int64_t r = 0; r < s.rows; ++r) {
      double sq = 0;
      for (int64_t i = 0; i < s.dim; ++i) sq += static_cast<double>(x[r * s.dim + i]) * x[r * s.dim + i];
      const double rs = 1.0 / std::sqrt(sq / s.dim + 1e-6);
      ASSERT_NEAR(rstd[r], rs, 1e-5 * rs) << s.rows << "x" << s.dim << " row " << r;
      for (int64_t i = 0; i < s.dim; ++i) {
        const double y = x[r * s.dim + i] * rs * weight[i];
        ASSERT_NEAR(out[r * s.dim + i], y, 1e-5 * (1 + std::abs(y))) << s.rows << "x" << s.dim;
        ASSERT_EQ(out16[r * s.dim + i], round_bf16(out[r * s.dim + i]));
      }
    }
  }
}

TEST(RmsNorm, BackwardMatchesFiniteDifferences) {
  for (const int64_t rows : {3, 520}) {  // single-threaded and threaded
    const int64_t dim = 33;
    auto x = testing::random_vector(rows * dim, 4, -2, 2);
    auto weight = testing::random_vector(dim, 5, 0.5f, 1.5f);
    const auto w = testing::random_vector(rows * dim, 7);
    std::vector<float> out(rows * dim), rstd(rows), dx(rows * dim), dweight(dim);
    auto loss = [&] {
      cpu::rms_norm_forward(rows, dim, 1e-5f, x.data(), weight.data(), false, out.data(), rstd.data());
      return testing::probe(out, w);
    };
    loss();
    cpu::rms_norm_backward_dx(rows, dim, x.data(), weight.data(), rstd.data(), w.data(), dx.data());
    cpu::rms_norm_backward_weight(rows, dim, x.data(), rstd.data(), w.data(), dweight.data());
    testing::expect_gradient_close(x, dx, loss, 1e-2, 1e-3, 1e-2, "dx");
    testing::expect_gradient_close(weight, dweight, loss, 1e-2, 1e-3, 1e-2, "dweight");
  }
}

TEST(RmsNorm, WeightGradientIsADoubleSumAtAnyThreadCount) {
  const int64_t rows = 1000, dim = 40;  // four pieces, the last one short
  const auto x = testing::random_vector(rows * dim, 8, -2, 2), g = testing::random_vector(rows * dim, 9);
  std::vector<float> out(rows * dim), rstd(rows), dweight(dim), one_thread(dim);
  const auto weight = testing::random_vector(dim, 10, 0.5f, 1.5f);
  cpu::rms_norm_forward(rows, dim, 1e-5f, x.data(), weight.data(), false, out.data(), rstd.data());
  cpu::rms_norm_backward_weight(rows, dim, x.data(), rstd.data(), g.data(), dweight.data());
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  cpu::rms_norm_backward_weight(rows, dim, x.data(), rstd.data(), g.data(), one_thread.data());
  omp_set_num_threads(threads);
  EXPECT_TRUE(testing::same_bits(dweight, one_thread));
  for (int64_t i = 0; i < dim; ++i) {
    double want = 0;
    for (int64_t r = 0; r < rows; ++r) want += static_cast<double>(g[r * dim + i]) * x[r * dim + i] * rstd[r];
    EXPECT_NEAR(dweight[i], want, 1e-4) << i;
  }
}

TEST(RmsNormOp, MatchesTheCpuCoreBitForBit) {
  for (const Shape s : {Shape{37, 32}, Shape{600, 40}, Shape{1, 1}, Shape{33, 7}}) {
    const auto x = testing::random_vector(s.rows * s.dim, 1, -3, 5), w = testing::random_vector(s.dim, 2, 0.5f, 1.5f),
               d = testing::random_vector(s.rows * s.dim, 4);
    for (const bool bf16 : {false, true}) {
      std::vector<float> want(x.size()), want_rstd(s.rows), want_dx(x.size()), want_dweight(s.dim);
      cpu::rms_norm_forward(s.rows, s.dim, 1e-6f, x.data(), w.data(), bf16, want.data(), want_rstd.data());
      cpu::rms_norm_backward_dx(s.rows, s.dim, x.data(), w.data(), want_rstd.data(), d.data(), want_dx.data());
      cpu::rms_norm_backward_weight(s.rows, s.dim, x.data(), want_rstd.data(), d.data(), want_dweight.data());
      Context c;
      const Tensor xt = testing::host_tensor(x, {s.rows, s.dim}), wt = testing::host_tensor(w, {s.dim}),
                   dt = testing::host_tensor(d, {s.rows, s.dim});
      Tensor out, rstd, dx, dweight;
      rms_norm_forward(c, xt, wt, 1e-6f, bf16, out, rstd);
      rms_norm_backward(c, xt, wt, rstd, dt, dx, dweight);
      EXPECT_TRUE(testing::same_bits(out.span<float>(), want));
      EXPECT_TRUE(testing::same_bits(rstd.span<float>(), want_rstd));
      EXPECT_TRUE(testing::same_bits(dx.span<float>(), want_dx));
      EXPECT_TRUE(testing::same_bits(dweight.span<float>(), want_dweight));
    }
  }
}

TEST(RmsNormOp, AResidualGradientIsAddedAsAddWouldAddIt) {
  const Shape s{37, 32};
  const auto x = testing::random_vector(s.rows * s.dim, 1, -3, 5), w = testing::random_vector(s.dim, 2, 0.5f, 1.5f),
             d = testing::random_vector(s.rows * s.dim, 4), r = testing::random_vector(s.rows * s.dim, 5);
  Context c;
  const Tensor xt = testing::host_tensor(x, {s.rows, s.dim}), wt = testing::host_tensor(w, {s.dim}),
               dt = testing::host_tensor(d, {s.rows, s.dim}), rt = testing::host_tensor(r, {s.rows, s.dim});
  Tensor out, rstd, dx, dweight, fused, fused_dweight, sum;
  rms_norm_forward(c, xt, wt, 1e-6f, false, out, rstd);
  rms_norm_backward(c, xt, wt, rstd, dt, dx, dweight);
  add(c, rt, dx, false, sum);
  rms_norm_backward(c, xt, wt, rstd, dt, fused, fused_dweight, &rt);
  EXPECT_TRUE(testing::same_bits(fused.span<float>(), sum.span<float>()));
  EXPECT_TRUE(testing::same_bits(fused_dweight.span<float>(), dweight.span<float>()));
}

TEST(RmsNormOp, ErrorsNameTheOpTheTensorAndTheFix) {
  using testing::error_of;
  using ::testing::HasSubstr;
  Context c;
  Tensor x({4, 8}, DType::F32), w({8}, DType::F32), short_w({7}, DType::F32), x3({2, 2, 8}, DType::F32);
  Tensor out, rstd, dx, dweight;
  EXPECT_THAT(error_of([&] { rms_norm_forward(c, x3, w, 1e-6f, false, out, rstd); }),
              HasSubstr("rms_norm_forward: x must be [rows, dim], got [2, 2, 8]: view"));
  EXPECT_THAT(error_of([&] { rms_norm_forward(c, x, short_w, 1e-6f, false, out, rstd); }),
              HasSubstr("rms_norm_forward: weight must be [8], got [7]"));
  rms_norm_forward(c, x, w, 1e-6f, false, out, rstd);
  Tensor wide_rstd({5}, DType::F32);
  EXPECT_THAT(error_of([&] { rms_norm_backward(c, x, w, wide_rstd, x, dx, dweight); }),
              HasSubstr("rms_norm_backward: rstd (rms_norm_forward's) must be [4], got [5]"));
  Tensor dout({4, 8}, DType::F32);
  Tensor alias = dout.view(0, {4, 8});
  EXPECT_THAT(error_of([&] { rms_norm_backward(c, x, w, rstd, dout, alias, dweight); }),
              HasSubstr("rms_norm_backward: dx must be a tensor of its own (not x, dout or residual)"));
  Tensor residual({4, 8}, DType::F32), short_residual({3, 8}, DType::F32);
  Tensor residual_alias = residual.view(0, {4, 8});
  EXPECT_THAT(error_of([&] { rms_norm_backward(c, x, w, rstd, dout, residual_alias, dweight, &residual); }),
              HasSubstr("rms_norm_backward: dx must be a tensor of its own (not x, dout or residual)"));
  EXPECT_THAT(error_of([&] { rms_norm_backward(c, x, w, rstd, dout, dx, dweight, &short_residual); }),
              HasSubstr("rms_norm_backward: residual (dout's shape) must be [4, 8], got [3, 8]"));
}

// add_rms_norm: residual = bf16(residual + delta) in place, out = rms_norm_forward's bf16 bits of that
// residual (as f32), and without delta the residual untouched; threaded rows (600 x 64) too.
TEST(AddRmsNorm, IsTheRoundedSumThenRmsNormForward) {
  for (const Shape s : {Shape{1, 1}, Shape{3, 7}, Shape{37, 33}, Shape{600, 64}}) {
    const auto r0 = testing::random_vector(s.rows * s.dim, 21, -3, 3);
    const auto d0 = testing::random_vector(s.rows * s.dim, 22, -1, 1);
    const auto weight = testing::random_vector(s.dim, 23, 0.5f, 1.5f);
    for (const bool with_delta : {true, false}) {
      Context c;
      Tensor residual = testing::host_tensor(r0, {s.rows, s.dim}, DType::Bf16);
      const Tensor delta = testing::host_tensor(d0, {s.rows, s.dim}, DType::Bf16);
      const Tensor w = testing::host_tensor(weight, {s.dim});
      std::vector<float> sum(r0.size());
      for (size_t i = 0; i < sum.size(); ++i) {
        const float r = bf16_to_float(residual.data<uint16_t>()[i]), d = bf16_to_float(delta.data<uint16_t>()[i]);
        sum[i] = with_delta ? round_bf16(r + d) : r;
      }
      Tensor out;
      add_rms_norm(c, residual, with_delta ? &delta : nullptr, w, 1e-6f, {.bf16 = &out});
      std::vector<float> want(sum.size()), rstd(s.rows);
      cpu::rms_norm_forward(s.rows, s.dim, 1e-6f, sum.data(), weight.data(), true, want.data(), rstd.data());
      EXPECT_TRUE(testing::same_bits(testing::float_values(residual), sum)) << s.rows << "x" << s.dim;
      EXPECT_EQ(out.dtype(), DType::Bf16);
      EXPECT_TRUE(testing::same_bits(testing::float_values(out), want)) << s.rows << "x" << s.dim;
    }
  }
}

TEST(AddRmsNorm, Fp8OutputsAreQuantizeOfTheBf16Result) {
  const int64_t rows = 9, dim = 40;
  const auto r0 = testing::random_vector(rows * dim, 24, -3, 3), d0 = testing::random_vector(rows * dim, 25, -1, 1);
  auto weight = testing::random_vector(dim, 26, 0.5f, 1.5f);
  weight[3] = 0.0f;  // a zero column
  Context c;
  const Tensor delta = testing::host_tensor(d0, {rows, dim}, DType::Bf16), w = testing::host_tensor(weight, {dim});
  testing::expect_fp8_is_quantized_bf16(c, [&](const ActivationOut& out) {
    Tensor residual = testing::host_tensor(r0, {rows, dim}, DType::Bf16);
    add_rms_norm(c, residual, &delta, w, 1e-6f, out);
  });
}

TEST(AddRmsNorm, ErrorsNameTheOpTheTensorAndTheFix) {
  using testing::error_of;
  using ::testing::HasSubstr;
  Context c;
  Tensor residual({4, 8}, DType::Bf16), f32({4, 8}, DType::F32), w({8}, DType::F32), out;
  QTensor q;
  const Tensor scale = testing::scalar_tensor(1.0f);
  EXPECT_THAT(error_of([&] { add_rms_norm(c, f32, nullptr, w, 1e-6f, {.bf16 = &out}); }),
              HasSubstr("add_rms_norm: residual must be bf16"));
  EXPECT_THAT(error_of([&] { add_rms_norm(c, residual, &f32, w, 1e-6f, {.bf16 = &out}); }),
              HasSubstr("add_rms_norm: delta (residual's shape) must be bf16"));
  EXPECT_THAT(error_of([&] { add_rms_norm(c, residual, nullptr, w, 1e-6f, {}); }),
              HasSubstr("add_rms_norm: the ActivationOut needs exactly one of bf16 and fp8 set (got neither)"));
  EXPECT_THAT(error_of([&] { add_rms_norm(c, residual, nullptr, w, 1e-6f, {.bf16 = &out, .fp8 = &q}); }),
              HasSubstr("(got both)"));
  EXPECT_THAT(error_of([&] { add_rms_norm(c, residual, nullptr, w, 1e-6f, {.fp8 = &q}); }),
              HasSubstr("add_rms_norm: a per-tensor fp8 ActivationOut needs its scale"));
  QuantSpec row;
  row.granularity = Granularity::PerRow;
  EXPECT_THAT(error_of([&] {
                add_rms_norm(c, residual, nullptr, w, 1e-6f, {.fp8 = &q, .spec = row, .scale = &scale});
              }),
              HasSubstr("a per-row fp8 ActivationOut computes its scales (pass no scale)"));
  QuantSpec e5m2;
  e5m2.format = Fp8Format::E5M2;
  EXPECT_THAT(error_of([&] {
                add_rms_norm(c, residual, nullptr, w, 1e-6f, {.fp8 = &q, .spec = e5m2, .scale = &scale});
              }),
              HasSubstr("an fp8 ActivationOut is E4M3"));
  QuantSpec group;
  group.granularity = Granularity::PerGroup;
  EXPECT_THAT(error_of([&] { add_rms_norm(c, residual, nullptr, w, 1e-6f, {.fp8 = &q, .spec = group}); }),
              HasSubstr("per tensor (static scale) or per row (current scaling)"));
  Tensor alias = residual.view(0, {4, 8});
  EXPECT_THAT(error_of([&] { add_rms_norm(c, residual, nullptr, w, 1e-6f, {.bf16 = &alias}); }),
              HasSubstr("add_rms_norm: out.bf16 must be a tensor of its own"));
}

}  // namespace
}  // namespace fp8kit::ops
