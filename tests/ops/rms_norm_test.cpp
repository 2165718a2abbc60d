// RMSNorm's CPU core against a double reference (eps inside the sqrt, HF's out = (x rstd) weight), bf16
// rounding of the output, its backward by finite differences and dweight against a double sum (the
// same bits at any thread count); the op on Tensors: the core's bits and its argument errors.
#include "ops/rms_norm.h"

#include "common/error_of.h"
#include "common/gradient_check.h"
#include "cpu_op_test.h"
#include "numerics/cast.h"
#include "ops/cpu/rms_norm.h"

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
              HasSubstr("rms_norm_backward: dx must be a tensor of its own (not x or dout)"));
}

}  // namespace
}  // namespace fp8kit::ops
