// An optimizer step captured as a CUDA graph and replayed: clip_by_global_norm then AdamW with a warmup
// + cosine schedule. Each replay must read the current iteration count and norm on the device (the
// schedule's rate, the clipping factor), so five runs (eager, capture, three replays) follow the CPU's
// five steps: the norms and iteration counts step by step, the weights within Adam's op-table bounds.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/host_tensors.h"
#include "exec/captured_step.h"
#include "ops/adam.h"
#include "ops/cuda/gpu_test.h"
#include "ops/cuda/op_table.h"
#include "ops/grad_norm.h"

namespace fp8kit::testing {
namespace {

TEST(CapturedOptimizer, ScheduleAndClippingFollowTheDeviceCounts) {
  FP8KIT_REQUIRE_GPU();
  const int64_t n = 100003;
  ops::AdamOptions options{3e-3f, 0.9f, 0.95f, 1e-8f};
  options.weight_decay = 0.1f;
  options.warmup_steps = 2;
  options.decay_steps = 4;
  options.min_lr_ratio = 0.1f;
  struct State {
    Tensor w, g, m, v, iterations, norm;
  };
  const auto make = [&](Device d) {
    return State{device_tensor(random_values(n, 1), {n}, d), device_tensor(random_values(n, 2), {n}, d),
                 Tensor({n}, DType::F32, d), Tensor({n}, DType::F32, d), Tensor({1}, DType::F32, d),
                 Tensor({1}, DType::F32, d)};
  };
  const auto step = [&](State& s) {
    return [&options, &s](ops::Context& c) {
      ops::clip_by_global_norm(c, s.g, 1.0f, s.norm);
      ops::adam_step(c, options, s.iterations, s.w, s.g, s.m, s.v);
    };
  };
  State cpu = make(Device::Cpu), gpu = make(Device::Cuda);
  ops::Context cpu_context(Device::Cpu, 1), gpu_context(Device::Cuda, 1);
  exec::CapturedStep cpu_step(step(cpu)), gpu_step(step(gpu));
  for (int run = 0; run < 5; ++run) {
    cpu_step.run(cpu_context);
    gpu_step.run(gpu_context);
    gpu_context.synchronize();
    EXPECT_NEAR(float_values(gpu.norm)[0], cpu.norm.data<float>()[0], 1e-6 * cpu.norm.data<float>()[0]) << run;
    EXPECT_EQ(float_values(gpu.iterations)[0], static_cast<float>(run + 1));
  }
  EXPECT_TRUE(gpu_step.captured());
  const std::vector<float> got = float_values(gpu.w), want = float_values(cpu.w), start = random_values(n, 1);
  for (int64_t i = 0; i < n; ++i) {
    ASSERT_NEAR(got[i], want[i], 1e-5 * std::abs(want[i] - start[i]) + 4e-7) << i;  // a few ulp over 5 steps
  }
}

}  // namespace
}  // namespace fp8kit::testing
