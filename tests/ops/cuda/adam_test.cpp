// GPU Adam against optim::Adam over three steps: the same float32 operations without contraction,
// so w, m and v agree to the bit unless alpha's powers round differently (then within 2 ulp).
#include "ops/cuda/adam.h"

#include <gtest/gtest.h>

#include <vector>

#include "ops/cuda/device_buffer.h"
#include "ops/cuda/gpu_test.h"
#include "optim/adam.h"

namespace fp8kit::cuda {
namespace {

TEST(CudaAdam, MatchesKerasAdamOnTheCpu) {
  FP8KIT_REQUIRE_GPU();
  for (int64_t n : {1, 1000, 653953}) {
    nn::Parameter p{"w", {n}, testing::random_normal(n, 1, 0.05f), std::vector<float>(n)};
    optim::Adam cpu({&p});
    DeviceBuffer<float> w(n), g(n), m(n), v(n), iterations(1);
    w.upload(p.value);
    m.fill_bytes(0);
    v.fill_bytes(0);
    iterations.fill_bytes(0);
    for (int step = 0; step < 3; ++step) {
      p.grad = testing::random_normal(n, 10 + step, step == 1 ? 1e-6f : 1.0f);
      if (n > 1) p.grad[0] = 0.0f;  // an unused row: no move
      g.upload(p.grad);
      cpu.step();
      adam_step(cpu.options(), iterations.data(), w.data(), g.data(), m.data(), v.data(), n, nullptr);
      const std::vector<float> got = w.to_host();
      EXPECT_LE(testing::max_ulp_difference(got, p.value), 2) << "n " << n << " step " << step;
      EXPECT_EQ(iterations.to_host()[0], static_cast<float>(step + 1));
    }
  }
}

}  // namespace
}  // namespace fp8kit::cuda
