// LayerNorm against a double reference (population variance, eps inside the sqrt) and its
// backward by finite differences.
#include "ops/layer_norm.h"

#include "common/gradient_check.h"
#include "numerics/cast.h"

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
  layer_norm_forward(rows, dim, 1e-5f, x.data(), gamma.data(), beta.data(), false, out.data(), mean.data(), rstd.data());
  layer_norm_forward(rows, dim, 1e-5f, x.data(), gamma.data(), beta.data(), true, out16.data(), mean.data(),
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
      layer_norm_forward(rows, dim, 1e-5f, x.data(), gamma.data(), beta.data(), false, out.data(), mean.data(),
                         rstd.data());
      return testing::probe(out, w);
    };
    loss();
    layer_norm_backward(rows, dim, x.data(), gamma.data(), mean.data(), rstd.data(), w.data(), dx.data(),
                        dgamma.data(), dbeta.data());
    testing::expect_gradient_close(x, dx, loss, 1e-2, 1e-3, 1e-2, "dx");
    testing::expect_gradient_close(gamma, dgamma, loss, 1e-2, 1e-3, 1e-2, "dgamma");
    testing::expect_gradient_close(beta, dbeta, loss, 1e-2, 1e-3, 1e-2, "dbeta");
  }
}

}  // namespace
}  // namespace fp8kit::ops
