// CapturedStep and ops::Context on the CPU: a step runs every time, in program order.
#include "exec/captured_step.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace fp8kit::exec {
namespace {

TEST(CapturedStep, RunsTheStepEveryTimeOnTheCpu) {
  ops::Context context(Device::Cpu, 1);
  int runs = 0;
  CapturedStep step([&](ops::Context& c) {
    ++runs;
    c.fork(ops::Lane::Side);
    c.join_all();
    c.advance_step();
  });
  for (int i = 0; i < 3; ++i) step.run(context);
  EXPECT_EQ(runs, 3);
  EXPECT_EQ(context.step(), 3u);
  EXPECT_FALSE(step.captured());
  EXPECT_THROW(context.scratch(16), Error);
}

}  // namespace
}  // namespace fp8kit::exec
