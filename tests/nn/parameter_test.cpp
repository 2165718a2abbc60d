// ParameterSet: views of two flat buffers at 256-byte aligned offsets, initial values, decayed
// parameters first, a move to another device keeping the values; HostState: host views of state tensors, pulled and pushed.
#include "nn/parameter.h"

#include <gtest/gtest.h>

#include "base/error.h"

namespace fp8kit::nn {
namespace {

TEST(ParameterSet, ViewsOfAlignedFlatBuffersWithInitialValues) {
  ParameterSet set;
  Parameter& a = set.add("a", {3, 2}, 0.5f);
  Parameter& b = set.add("b", {70});
  EXPECT_EQ(a.value.numel(), 0);  // nothing allocated yet
  set.allocate(Device::Cpu);
  EXPECT_THROW(set.add("late", {1}), Error);
  EXPECT_EQ(a.value.shape(), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(set.offset(0), 0);
  EXPECT_EQ(set.offset(1), 64);  // 256 bytes
  EXPECT_EQ(set.values().numel(), 64 + 128);
  EXPECT_EQ(set.count(), 6 + 70);
  EXPECT_TRUE(a.value.shares_storage(set.values()));
  EXPECT_TRUE(b.grad.shares_storage(set.grads()));
  for (float v : a.value.span<float>()) EXPECT_EQ(v, 0.5f);
  for (float v : b.value.span<float>()) EXPECT_EQ(v, 0.0f);
  b.value.data<float>()[69] = 7.0f;
  EXPECT_EQ(set.values().data<float>()[64 + 69], 7.0f);
  if (cuda_available()) {  // the buffers move; the views follow with the values
    set.allocate(Device::Cuda);
    EXPECT_EQ(b.value.device(), Device::Cuda);
    EXPECT_EQ(b.value.to(Device::Cpu).data<float>()[69], 7.0f);
  }
}

TEST(ParameterSet, DecayedParametersComeFirst) {
  ParameterSet set;
  set.add("norm", {5}, 1.0f, /*decayed=*/false);
  set.add("w", {3, 2});
  set.add("bias", {70}, 0.0f, false);
  set.add("v", {10});
  set.allocate(Device::Cpu);
  EXPECT_EQ(set.offset(1), 0);  // the decayed ones, in order
  EXPECT_EQ(set.offset(3), 64);
  EXPECT_EQ(set.decayed_end(), 128);
  EXPECT_EQ(set.offset(0), 128);  // then the rest, in order
  EXPECT_EQ(set.offset(2), 192);
  EXPECT_EQ(set.parameters()[0]->name, "norm");  // registration order is kept for state and files
  for (float v : set.parameters()[0]->value.span<float>()) EXPECT_EQ(v, 1.0f);
}

TEST(HostState, ViewsCpuTensorsInPlace) {
  Tensor t({4}, DType::F32), scalar({1}, DType::F32);
  HostState state({{"t", {2, 2}, &t}, {"s", {}, &scalar, Domain::Positive}});
  ASSERT_EQ(state.entries().size(), 2u);
  state.entries()[0].data[3] = 2.0f;  // a CPU tensor's own memory: no copy to pull or push
  EXPECT_EQ(t.data<float>()[3], 2.0f);
  EXPECT_EQ(state.entries()[1].domain, Domain::Positive);
  EXPECT_THROW(HostState({{"wrong", {5}, &t}}), Error);
}

}  // namespace
}  // namespace fp8kit::nn
