// GPU LayerNorm against the CPU core (ops/cpu/layer_norm.h). The GPU sums a row as a warp tree (a
// block tree beyond 256 columns: 4096, and 1001 whose rows are not 16-byte aligned), the CPU
// sequentially: float32 outputs, statistics and dx agree to ~1e-6 relative (bound 1e-5); bf16 outputs
// then differ only where a value sits at a rounding boundary (bound 2e-3). dgamma and dbeta are added
// in the CPU's order (pieces of 256 rows, dgamma's multiply-adds fused on both): given the CPU's mean
// and rstd, dgamma and dbeta are the CPU's bits. Every run gives the same bits.
#include "ops/cuda/layer_norm.h"

#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "ops/cuda/gpu_test.h"
#include "ops/cpu/layer_norm.h"
#include "runtime/cuda/device_buffer.h"

namespace fp8kit::cuda {
namespace {

using testing::same_bits;

TEST(CudaLayerNorm, MatchesTheCpuOp) {
  FP8KIT_REQUIRE_GPU();
  struct Case {
    int64_t rows, dim;
  };
  for (const Case c : {Case{6400, 32}, Case{5, 160}, Case{217, 256}, Case{1, 1}, Case{33, 7}, Case{700, 40},
                        Case{40, 4096}, Case{9, 1001}}) {
    const std::vector<float> x = testing::random_normal(c.rows * c.dim, 1, 2.0f),
                             gamma = testing::random_normal(c.dim, 2), beta = testing::random_normal(c.dim, 3),
                             dout = testing::random_normal(c.rows * c.dim, 4);
    DeviceBuffer<float> d_x(x.size()), d_gamma(gamma.size()), d_beta(beta.size()), d_out(x.size()),
        d_mean(c.rows), d_rstd(c.rows), d_dout(x.size()), d_dx(x.size()), d_dg(c.dim), d_db(c.dim),
        workspace(layer_norm_backward_workspace(c.rows, c.dim));
    d_x.upload(x);
    d_gamma.upload(gamma);
    d_beta.upload(beta);
    d_dout.upload(dout);
    std::vector<float> out(x.size()), mean(c.rows), rstd(c.rows), dx(x.size()), dg(c.dim), db(c.dim);
    for (bool bf16 : {false, true}) {
      ops::cpu::layer_norm_forward(c.rows, c.dim, 1e-5f, x.data(), gamma.data(), beta.data(), bf16, out.data(),
                                   mean.data(), rstd.data());
      layer_norm_forward(c.rows, c.dim, 1e-5f, d_x.data(), d_gamma.data(), d_beta.data(), bf16, d_out.data(),
                         d_mean.data(), d_rstd.data(), nullptr);
      EXPECT_LT(testing::relative_l2(d_out.to_host(), out), bf16 ? 2e-3 : 1e-5) << c.rows << "x" << c.dim;
      EXPECT_LT(testing::relative_l2(d_rstd.to_host(), rstd), 1e-5);
    }
    ops::cpu::layer_norm_backward_dx(c.rows, c.dim, x.data(), gamma.data(), mean.data(), rstd.data(), dout.data(),
                                     nullptr, dx.data());
    ops::cpu::layer_norm_backward_params(c.rows, c.dim, x.data(), mean.data(), rstd.data(), dout.data(), nullptr,
                                         dg.data(), db.data());
    // The backward from the CPU's statistics, so that the parameter gradients can match bit for bit.
    d_mean.upload(mean);
    d_rstd.upload(rstd);
    std::vector<float> first_dx, first_dg, first_db;
    for (int run = 0; run < 2; ++run) {
      d_dg.fill_bytes(0x7F);  // poisoned: overwritten, not accumulated into
      d_db.fill_bytes(0x7F);
      layer_norm_backward(c.rows, c.dim, d_x.data(), d_gamma.data(), d_mean.data(), d_rstd.data(), d_dout.data(),
                          nullptr, d_dx.data(), d_dg.data(), d_db.data(), workspace.data(), nullptr);
      const std::vector<float> gdx = d_dx.to_host(), gdg = d_dg.to_host(), gdb = d_db.to_host();
      EXPECT_LT(testing::relative_l2(gdx, dx), c.dim == 1 ? 1e-3 : 1e-5) << c.rows << "x" << c.dim;
      EXPECT_EQ(testing::max_ulp_difference(gdg, dg), 0) << "dgamma " << c.rows << "x" << c.dim;
      EXPECT_EQ(testing::max_ulp_difference(gdb, db), 0) << "dbeta " << c.rows << "x" << c.dim;
      if (run == 0) {
        first_dx = gdx, first_dg = gdg, first_db = gdb;
      } else {
        EXPECT_TRUE(same_bits(gdx, first_dx) && same_bits(gdg, first_dg) && same_bits(gdb, first_db))
            << "two runs differ, " << c.rows << "x" << c.dim;
      }
    }
  }
}

// The output gradient as two addends (a residual's branches, summed as they are read) gives the bits of
// the same backward from their float32 sum.
TEST(CudaLayerNorm, BackwardOfTwoAddendsIsTheBackwardOfTheirSum) {
  FP8KIT_REQUIRE_GPU();
  for (const auto& [rows, dim] : std::vector<std::pair<int64_t, int64_t>>{{6400, 32}, {33, 7}, {217, 256}, {40, 4096}, {9, 1001}}) {
    const std::vector<float> x = testing::random_normal(rows * dim, 1, 2.0f), gamma = testing::random_normal(dim, 2),
                             a = testing::random_normal(rows * dim, 4), b = testing::random_normal(rows * dim, 5),
                             mean = testing::random_normal(rows, 6), rstd = testing::random_normal(rows, 7);
    std::vector<float> sum(a.size());
    for (size_t i = 0; i < a.size(); ++i) sum[i] = a[i] + b[i];
    DeviceBuffer<float> d_x(x.size()), d_gamma(dim), d_mean(rows), d_rstd(rows), d_a(a.size()), d_b(b.size()),
        d_sum(sum.size()), d_dx(x.size()), d_dg(dim), d_db(dim), workspace(layer_norm_backward_workspace(rows, dim));
    d_x.upload(x);
    d_gamma.upload(gamma);
    d_mean.upload(mean);
    d_rstd.upload(rstd);
    d_a.upload(a);
    d_b.upload(b);
    d_sum.upload(sum);
    std::vector<std::vector<float>> results[2];
    for (int fused = 0; fused < 2; ++fused) {
      layer_norm_backward(rows, dim, d_x.data(), d_gamma.data(), d_mean.data(), d_rstd.data(),
                          fused ? d_a.data() : d_sum.data(), fused ? d_b.data() : nullptr, d_dx.data(), d_dg.data(),
                          d_db.data(), workspace.data(), nullptr);
      results[fused] = {d_dx.to_host(), d_dg.to_host(), d_db.to_host()};
    }
    for (int k = 0; k < 3; ++k)
      EXPECT_TRUE(same_bits(results[1][k], results[0][k])) << rows << "x" << dim << " output " << k;
  }
}

// The residual added in the dx pass (the warp kernel, the vectorised and the scalar block kernels):
// the bits of the GPU's dx without it, plus the residual in float32 (ops::add's rounding, no FMA).
TEST(CudaLayerNorm, ResidualInTheDxPassIsAddedAsAddAddsIt) {
  FP8KIT_REQUIRE_GPU();
  for (const auto& [rows, dim] : std::vector<std::pair<int64_t, int64_t>>{{6400, 32}, {33, 7}, {40, 4096}, {9, 1001}}) {
    const std::vector<float> x = testing::random_normal(rows * dim, 1, 2.0f), gamma = testing::random_normal(dim, 2),
                             dout = testing::random_normal(rows * dim, 4), residual = testing::random_normal(rows * dim, 5),
                             mean = testing::random_normal(rows, 6), rstd = testing::random_normal(rows, 7);
    DeviceBuffer<float> d_x(x.size()), d_gamma(dim), d_mean(rows), d_rstd(rows), d_dout(dout.size()),
        d_residual(residual.size()), d_dx(x.size()), d_sum(x.size());
    d_x.upload(x);
    d_gamma.upload(gamma);
    d_mean.upload(mean);
    d_rstd.upload(rstd);
    d_dout.upload(dout);
    d_residual.upload(residual);
    layer_norm_backward_dx(rows, dim, d_x.data(), d_gamma.data(), d_mean.data(), d_rstd.data(), d_dout.data(), nullptr,
                           d_dx.data(), nullptr);
    layer_norm_backward_dx(rows, dim, d_x.data(), d_gamma.data(), d_mean.data(), d_rstd.data(), d_dout.data(), nullptr,
                           d_sum.data(), nullptr, d_residual.data());
    std::vector<float> want = d_dx.to_host();
    for (size_t i = 0; i < want.size(); ++i) want[i] = residual[i] + want[i];
    EXPECT_TRUE(same_bits(d_sum.to_host(), want)) << rows << "x" << dim;
  }
}

}  // namespace
}  // namespace fp8kit::cuda
