// LayerNorm's CPU core against a double reference (population variance, eps inside the sqrt) and its
// backward by finite differences; the op on Tensors: the bits of the CPU core that nn::LayerNorm runs
// (with two output gradients: of the backward of their float32 sum, as the seed model adds them with
// add(..., bf16=false)), and its argument errors.
#include "ops/layer_norm.h"

#include "common/error_of.h"
#include "common/gradient_check.h"
#include "cpu_op_test.h"
#include "numerics/cast.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/layer_norm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace fp8kit::ops {
namespace {

TEST(LayerNorm, ForwardMatchesReference) {
  const int64_t rows = 37, dim = 32;
  const auto x = testing::random_vector(rows * dim, 1, -3, 5);
  const auto gamma = testing::random_vector(dim, 2, 0.5f, 1.5f), beta = testing::random_vector(dim, 3);
  std::vector<float> out(rows * dim), out16(rows * dim), mean(rows), rstd(rows);
  cpu::layer_norm_forward(rows, dim, 1e-5f, x.data(), gamma.data(), beta.data(), false, out.data(), mean.data(),
                          rstd.data());
  cpu::layer_norm_forward(rows, dim, 1e-5f, x.data(), gamma.data(), beta.data(), true, out16.data(), mean.data(),
                          rstd.data());
  for (int64_t r = 0; r < rows; ++r) {
    double mu = 0, var = 0;
    for (int64_t i = 0; i < dim; ++i) mu += x[r * dim + i];
    mu /= dim;
    for (int64_t i = 0; i < dim; ++i) var += (x[r * dim + i] - mu) * (x[r * dim + i] - mu);
    var /= dim;
    for (int64_t i = 0; i < dim; ++i) {
      const double y = (x[r * dim + i] - mu) / std::sqrt(var + 1e-5) * gamma[i] + beta[i];
      ASSERT_NEAR(out[r * dim + i], y, 1e-5);
      ASSERT_EQ(out16[r * dim + i], round_bf16(out[r * dim + i]));
    }
  }
}

TEST(LayerNorm, BackwardMatchesFiniteDifferences) {
  for (int64_t rows : {3, 520}) {  // single-threaded and threaded reductions
    const int64_t dim = 32;
    auto x = testing::random_vector(rows * dim, 4, -2, 2);
    auto gamma = testing::random_vector(dim, 5, 0.5f, 1.5f), beta = testing::random_vector(dim, 6);
    const auto w = testing::random_vector(rows * dim, 7);
    std::vector<float> out(rows * dim), mean(rows), rstd(rows), dx(rows * dim), dgamma(dim), dbeta(dim);
    auto loss = [&] {
      cpu::layer_norm_forward(rows, dim, 1e-5f, x.data(), gamma.data(), beta.data(), false, out.data(), mean.data(),
                              rstd.data());
      return testing::probe(out, w);
    };
    loss();
    cpu::layer_norm_backward_dx(rows, dim, x.data(), gamma.data(), mean.data(), rstd.data(), w.data(), nullptr,
                                dx.data());
    cpu::layer_norm_backward_params(rows, dim, x.data(), mean.data(), rstd.data(), w.data(), nullptr, dgamma.data(),
                                    dbeta.data());
    testing::expect_gradient_close(x, dx, loss, 1e-2, 1e-3, 1e-2, "dx");
    testing::expect_gradient_close(gamma, dgamma, loss, 1e-2, 1e-3, 1e-2, "dgamma");
    testing::expect_gradient_close(beta, dbeta, loss, 1e-2, 1e-3, 1e-2, "dbeta");
  }
}

TEST(LayerNormOp, MatchesTheCpuCoreBitForBit) {
  struct Case {
    int64_t rows, dim;
  };
  for (const Case s : {Case{37, 32}, Case{600, 40}, Case{1, 1}, Case{33, 7}}) {
    const auto x = testing::random_vector(s.rows * s.dim, 1, -3, 5), g = testing::random_vector(s.dim, 2, 0.5f, 1.5f),
               b = testing::random_vector(s.dim, 3), d1 = testing::random_vector(s.rows * s.dim, 4),
               d2 = testing::random_vector(s.rows * s.dim, 5);
    for (const bool bf16 : {false, true}) {
      std::vector<float> want(x.size()), want_mean(s.rows), want_rstd(s.rows), sum(d1.size()), want_dx(x.size()),
          want_dgamma(s.dim), want_dbeta(s.dim);
      cpu::layer_norm_forward(s.rows, s.dim, 1e-5f, x.data(), g.data(), b.data(), bf16, want.data(), want_mean.data(),
                              want_rstd.data());
      cpu::add(d1, d2, false, sum);
      cpu::layer_norm_backward_dx(s.rows, s.dim, x.data(), g.data(), want_mean.data(), want_rstd.data(), sum.data(),
                                  nullptr, want_dx.data());
      cpu::layer_norm_backward_params(s.rows, s.dim, x.data(), want_mean.data(), want_rstd.data(), sum.data(), nullptr,
                                      want_dgamma.data(), want_dbeta.data());

      Context c;
      const Tensor tx = testing::host_tensor(x, {s.rows, s.dim}), tg = testing::host_tensor(g, {s.dim}),
                   tb = testing::host_tensor(b, {s.dim}), t1 = testing::host_tensor(d1, {s.rows, s.dim}),
                   t2 = testing::host_tensor(d2, {s.rows, s.dim}), tsum = testing::host_tensor(sum, {s.rows, s.dim});
      Tensor out, mean, rstd, dx, dx_sum, dgamma, dbeta;
      layer_norm_forward(c, tx, tg, tb, 1e-5f, bf16, out, mean, rstd);
      EXPECT_TRUE(testing::same_bits(out.span<float>(), want)) << s.rows << "x" << s.dim << " bf16 " << bf16;
      EXPECT_TRUE(testing::same_bits(mean.span<float>(), want_mean));
      EXPECT_TRUE(testing::same_bits(rstd.span<float>(), want_rstd));
      layer_norm_backward_dx(c, tx, tg, mean, rstd, t1, &t2, dx);
      layer_norm_backward_dx(c, tx, tg, mean, rstd, tsum, nullptr, dx_sum);
      EXPECT_TRUE(testing::same_bits(dx.span<float>(), want_dx)) << s.rows << "x" << s.dim;
      EXPECT_TRUE(testing::same_bits(dx_sum.span<float>(), want_dx)) << s.rows << "x" << s.dim;
      // A residual added in the dx pass: add(residual, dx)'s bits.
      std::vector<float> want_residual_dx(x.size());
      cpu::add(d2, want_dx, false, want_residual_dx);
      Tensor residual_dx;
      layer_norm_backward_dx(c, tx, tg, mean, rstd, tsum, nullptr, residual_dx, &t2);
      EXPECT_TRUE(testing::same_bits(residual_dx.span<float>(), want_residual_dx)) << s.rows << "x" << s.dim;
      for (const Tensor* dout2 : {static_cast<const Tensor*>(&t2), static_cast<const Tensor*>(nullptr)}) {
        layer_norm_backward_params(c, tx, mean, rstd, dout2 != nullptr ? t1 : tsum, dout2, dgamma, dbeta);
        EXPECT_TRUE(testing::same_bits(dgamma.span<float>(), want_dgamma)) << s.rows << "x" << s.dim;
        EXPECT_TRUE(testing::same_bits(dbeta.span<float>(), want_dbeta)) << s.rows << "x" << s.dim;
      }
    }
  }
}

TEST(LayerNormOp, ErrorsNameTheOpAndTheTensor) {
  Context c;
  const Tensor x({4, 8}, DType::F32), gamma({8}, DType::F32), beta({8}, DType::F32), short_gamma({7}, DType::F32),
      x3({2, 2, 8}, DType::F32), x16({4, 8}, DType::Bf16), mean({4}, DType::F32), rstd({4}, DType::F32),
      dout({4, 8}, DType::F32), bad_dout({4, 7}, DType::F32), empty_cols({4, 0}, DType::F32);
  Tensor out, m, r, dx, dg, db;
  EXPECT_EQ(testing::error_of([&] { layer_norm_forward(c, x, short_gamma, beta, 1e-5f, false, out, m, r); }),
            "layer_norm_forward: gamma must be [8], got [7]");
  EXPECT_EQ(testing::error_of([&] { layer_norm_forward(c, x3, gamma, beta, 1e-5f, false, out, m, r); }),
            "layer_norm_forward: x must be [rows, dim], got [2, 2, 8]: view a [batch, seq, dim] tensor as [batch * "
            "seq, dim]");
  EXPECT_EQ(testing::error_of([&] { layer_norm_forward(c, x16, gamma, beta, 1e-5f, false, out, m, r); }),
            "layer_norm_forward: x must be f32, got bf16");
  EXPECT_EQ(testing::error_of([&] { layer_norm_forward(c, empty_cols, gamma, beta, 1e-5f, false, out, m, r); }),
            "layer_norm_forward: x must have at least one column (dim), got [4, 0]");
  EXPECT_EQ(testing::error_of([&] { layer_norm_backward_dx(c, x, gamma, mean, rstd, dout, &bad_dout, dx); }),
            "layer_norm_backward_dx: dout2 must be [4, 8], got [4, 7]");
  EXPECT_EQ(testing::error_of([&] { layer_norm_backward_params(c, x, rstd, gamma, dout, nullptr, dg, db); }),
            "layer_norm_backward_params: rstd (layer_norm_forward's) must be [4], got [8]");
  Tensor wrong_dx({4, 8}, DType::Bf16);
  EXPECT_EQ(testing::error_of([&] { layer_norm_backward_dx(c, x, gamma, mean, rstd, dout, nullptr, wrong_dx); }),
            "layer_norm_backward_dx: dx must be f32 on the cpu, got bf16 on the cpu");
}

}  // namespace
}  // namespace fp8kit::ops
