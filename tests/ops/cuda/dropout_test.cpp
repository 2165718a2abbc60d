// GPU dropout against ops::dropout_forward/backward: the same keep bits and values, bit for bit,
// for float32 and bf16, several (seed, step, site) keys and ragged sizes.
#include "ops/cuda/dropout.h"

#include <gtest/gtest.h>

#include <bit>
#include <vector>

#include "ops/cuda/gpu_test.h"
#include "ops/dropout.h"
#include "runtime/cuda/device_buffer.h"

namespace fp8kit::cuda {
namespace {

TEST(CudaDropout, SameBitsAsTheCpuMask) {
  FP8KIT_REQUIRE_GPU();
  for (int64_t n : {1, 31, 1000, 204800}) {
    const std::vector<float> x = testing::random_normal(static_cast<size_t>(n), static_cast<uint32_t>(n));
    DeviceBuffer<float> d_x(x.size()), d_out(x.size());
    DeviceBuffer<uint64_t> d_step(1);
    d_x.upload(x);
    for (uint64_t seed : {uint64_t{0}, uint64_t{1337}})
      for (uint64_t step : {uint64_t{0}, uint64_t{624}, uint64_t{1} << 40})
        for (uint32_t site : {0u, 5u})
          for (float rate : {0.1f, 0.5f})
            for (bool bf16 : {false, true}) {
              d_step.upload(std::vector<uint64_t>{step});
              const DropoutSite s{seed, d_step.data(), site, rate, true};
              const ops::DropoutMask mask(seed, step, site, rate);
              std::vector<float> want(x.size());
              ops::dropout_forward(mask, rate, bf16, x, want);
              dropout_forward(s, bf16, d_x.data(), d_out.data(), n, nullptr);
              EXPECT_EQ(testing::max_ulp_difference(d_out.to_host(), want), 0)
                  << "forward n " << n << " seed " << seed << " step " << step << " site " << site << " bf16 " << bf16;
              ops::dropout_backward(mask, rate, bf16, x, want);
              dropout_backward(s, bf16, d_x.data(), d_out.data(), n, nullptr);
              EXPECT_EQ(testing::max_ulp_difference(d_out.to_host(), want), 0)
                  << "backward n " << n << " seed " << seed << " step " << step << " site " << site;
            }
  }
}

TEST(CudaDropout, InactiveCopiesAndInPlaceWorks) {
  FP8KIT_REQUIRE_GPU();
  const std::vector<float> x = testing::random_normal(777, 3);
  DeviceBuffer<float> d_x(x.size()), d_out(x.size());
  d_x.upload(x);
  dropout_forward(DropoutSite{}, false, d_x.data(), d_out.data(), 777, nullptr);
  EXPECT_EQ(d_out.to_host(), x);
  DeviceBuffer<uint64_t> d_step(1);
  d_step.upload(std::vector<uint64_t>{9});
  std::vector<float> want(x.size());
  ops::dropout_forward(ops::DropoutMask(7, 9, 2, 0.1f), 0.1f, true, x, want);
  dropout_forward({7, d_step.data(), 2, 0.1f, true}, true, d_x.data(), d_x.data(), 777, nullptr);
  EXPECT_EQ(testing::max_ulp_difference(d_x.to_host(), want), 0);
}

}  // namespace
}  // namespace fp8kit::cuda
