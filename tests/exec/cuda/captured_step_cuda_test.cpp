// CapturedStep on the GPU: eager, then captured, then replayed; lanes forked and joined inside a
// captured step; the device step counter advanced by replays and the host's copy with it.
#include "exec/captured_step.h"

#include <gtest/gtest.h>

#include "ops/cuda/context.h"
#include "ops/cuda/gpu_test.h"
#include "ops/cuda/elementwise.h"

namespace fp8kit::exec {
namespace {

TEST(CapturedStepCuda, CapturesOnceAndReplaysWithLanes) {
  FP8KIT_REQUIRE_GPU();
  ops::Context context(Device::Cuda, 1);
  context.set_step(10);
  cuda::DeviceBuffer<uint64_t> counters(2);
  counters.fill_bytes(0, ops::stream(context));
  int host_runs = 0;
  CapturedStep step([&](ops::Context& c) {
    ++host_runs;
    c.fork(ops::Lane::A);
    {
      const ops::Context::OnLane lane(c, ops::Lane::A);
      cuda::increment(counters.data(), ops::stream(c));
      c.scratch(1024);
    }
    cuda::increment(counters.data() + 1, ops::stream(c));
    c.join_all();
    c.advance_step();
  });
  for (int i = 0; i < 5; ++i) step.run(context);
  context.synchronize();
  EXPECT_TRUE(step.captured());
  EXPECT_EQ(host_runs, 2);  // eager, then capture; three replays
  EXPECT_EQ(counters.to_host(ops::stream(context)), (std::vector<uint64_t>{5, 5}));
  EXPECT_EQ(context.step(), 15u);
  uint64_t device_step = 0;
  cudaMemcpy(&device_step, ops::device_step(context), sizeof device_step, cudaMemcpyDeviceToHost);
  EXPECT_EQ(device_step, 15u);
}

// A marker orders one point of a lane's work before another lane's, inside a captured step too: lane
// A writes 1 then (after the marker) lane B's increment must see it, whatever runs first.
TEST(CapturedStepCuda, MarkersOrderLanes) {
  FP8KIT_REQUIRE_GPU();
  ops::Context context(Device::Cuda, 1);
  cuda::DeviceBuffer<uint64_t> counter(1);
  ops::Context::Marker written;
  CapturedStep step([&](ops::Context& c) {
    c.fork(ops::Lane::A);
    c.fork(ops::Lane::B);
    {
      const ops::Context::OnLane lane(c, ops::Lane::A);
      FP8KIT_CUDA_CHECK(cudaMemsetAsync(counter.data(), 0, sizeof(uint64_t), ops::stream(c)));
      c.record(written);
    }
    const ops::Context::OnLane lane(c, ops::Lane::B);
    c.wait(written);
    cuda::increment(counter.data(), ops::stream(c));
  });
  for (int i = 0; i < 3; ++i) {
    step.run(context);
    context.synchronize();
    EXPECT_EQ(counter.to_host()[0], 1u) << "run " << i;
  }
  EXPECT_TRUE(step.captured());
  ops::Context fresh(Device::Cuda, 1);
  uint64_t device_step = 99;
  cudaMemcpy(&device_step, ops::device_step(fresh), sizeof device_step, cudaMemcpyDeviceToHost);
  EXPECT_EQ(device_step, 0u);  // a new context's device step starts at 0
}

}  // namespace
}  // namespace fp8kit::exec
