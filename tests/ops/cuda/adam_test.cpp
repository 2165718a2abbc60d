// GPU Adam against the CPU's update core (ops::adam_update, optim::Adam's) over three steps. The GPU rounds every operation (no contraction);
// the CPU build (GCC, C++: -ffp-contract=fast) fuses some multiply-adds of the moment updates, so
// the moments differ in the last bits and the updates w_t - w_{t-1} agree to ~1e-7 relative (measured
// on H200: bound 1e-6), not bit for bit.
#include "ops/cuda/adam.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "ops/cuda/gpu_test.h"
#include "ops/adam.h"
#include "runtime/cuda/device_buffer.h"

namespace fp8kit::cuda {
namespace {

TEST(CudaAdam, MatchesKerasAdamOnTheCpu) {
  FP8KIT_REQUIRE_GPU();
  for (int64_t n : {1, 1000, 653953}) {
    std::vector<float> value = testing::random_normal(n, 1, 0.05f), grad, cpu_m(n), cpu_v(n);
    const ops::AdamOptions options;
    DeviceBuffer<float> w(n), g(n), m(n), v(n), iterations(1);
    DeviceBuffer<uint64_t> step_counter(1);
    step_counter.fill_bytes(0);
    w.upload(value);
    m.fill_bytes(0);
    v.fill_bytes(0);
    iterations.fill_bytes(0);
    for (int step = 0; step < 3; ++step) {
      grad = testing::random_normal(n, 10 + step, step == 1 ? 1e-6f : 1.0f);
      if (n > 1) grad[0] = 0.0f;  // an unused row: no move
      g.upload(grad);
      const std::vector<float> before = value;
      ops::adam_update(ops::adam_coefficients(options, static_cast<float>(step + 1)), value.data(), grad.data(),
                       cpu_m.data(), cpu_v.data(), n);
      adam_step(options, iterations.data(), w.data(), g.data(), m.data(), v.data(), n, n, nullptr,
                step == 2 ? nullptr : step_counter.data());
      std::vector<float> got = w.to_host(), want = value;
      for (int64_t i = 0; i < n; ++i) {
        got[i] -= before[i];
        want[i] -= before[i];
      }
      const double error = testing::relative_l2(got, want);
      std::printf("adam n %ld step %d: measured error of the update %.2e\n", long(n), step, error);
      EXPECT_LT(error, 1e-6) << "n " << n << " step " << step;
      if (n > 1) {
        EXPECT_EQ(got[0], 0.0f);
      }
      w.upload(value);  // continue from the CPU's weights: errors do not accumulate
      EXPECT_EQ(iterations.to_host()[0], static_cast<float>(step + 1));
      EXPECT_EQ(step_counter.to_host()[0], static_cast<uint64_t>(step < 2 ? step + 1 : 2));  // not passed at step 2
    }
  }
}

}  // namespace
}  // namespace fp8kit::cuda
