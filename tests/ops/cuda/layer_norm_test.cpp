// GPU LayerNorm against ops::layer_norm_forward/backward. The GPU sums a row as a warp tree and the
// parameter gradients with atomics, the CPU sequentially: float32 results agree to ~1e-6 relative
// (bound 1e-5); bf16 outputs then differ only where a value sits at a rounding boundary (bound 2e-3).
#include "ops/cuda/layer_norm.h"

#include <gtest/gtest.h>

#include <vector>

#include "ops/cuda/device_buffer.h"
#include "ops/cuda/gpu_test.h"
#include "ops/layer_norm.h"

namespace fp8kit::cuda {
namespace {

TEST(CudaLayerNorm, MatchesTheCpuOp) {
  FP8KIT_REQUIRE_GPU();
  struct Case {
    int64_t rows, dim;
  };
  for (const Case c : {Case{6400, 32}, Case{5, 160}, Case{217, 256}, Case{1, 1}, Case{33, 7}}) {
    const std::vector<float> x = testing::random_normal(c.rows * c.dim, 1, 2.0f),
                             gamma = testing::random_normal(c.dim, 2), beta = testing::random_normal(c.dim, 3),
                             dout = testing::random_normal(c.rows * c.dim, 4);
    DeviceBuffer<float> d_x(x.size()), d_gamma(gamma.size()), d_beta(beta.size()), d_out(x.size()),
        d_mean(c.rows), d_rstd(c.rows), d_dout(x.size()), d_dx(x.size()), d_dg(c.dim), d_db(c.dim);
    d_x.upload(x);
    d_gamma.upload(gamma);
    d_beta.upload(beta);
    d_dout.upload(dout);
    std::vector<float> out(x.size()), mean(c.rows), rstd(c.rows), dx(x.size()), dg(c.dim), db(c.dim);
    for (bool bf16 : {false, true}) {
      ops::layer_norm_forward(c.rows, c.dim, 1e-5f, x.data(), gamma.data(), beta.data(), bf16, out.data(), mean.data(),
                              rstd.data());
      layer_norm_forward(c.rows, c.dim, 1e-5f, d_x.data(), d_gamma.data(), d_beta.data(), bf16, d_out.data(),
                         d_mean.data(), d_rstd.data(), nullptr);
      EXPECT_LT(testing::relative_l2(d_out.to_host(), out), bf16 ? 2e-3 : 1e-5) << c.rows << "x" << c.dim;
      EXPECT_LT(testing::relative_l2(d_rstd.to_host(), rstd), 1e-5);
    }
    ops::layer_norm_backward(c.rows, c.dim, x.data(), gamma.data(), mean.data(), rstd.data(), dout.data(), dx.data(),
                             dg.data(), db.data());
    layer_norm_backward(c.rows, c.dim, d_x.data(), d_gamma.data(), d_mean.data(), d_rstd.data(), d_dout.data(),
                        d_dx.data(), d_dg.data(), d_db.data(), nullptr);
    EXPECT_LT(testing::relative_l2(d_dx.to_host(), dx), c.dim == 1 ? 1e-3 : 1e-5) << c.rows << "x" << c.dim;
    EXPECT_LT(testing::relative_l2(d_dg.to_host(), dg), 1e-5);
    EXPECT_LT(testing::relative_l2(d_db.to_host(), db), 1e-5);
  }
}

}  // namespace
}  // namespace fp8kit::cuda
