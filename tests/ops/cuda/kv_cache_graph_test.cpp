// decode_attention captured once in a CUDA graph and replayed with other lengths (the engine's decode
// step: the grid depends on the batch and the cache's shape only, the lengths are read on the device):
// each replay gives the eager call's bits for its lengths, and the CPU's result within the op table's
// tolerance. Lengths grow past chunk boundaries and shrink to 1, and the slots change too.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "common/host_tensors.h"
#include "kv_cache_inputs.h"
#include "ops/cuda/context.h"
#include "ops/cuda/gpu_test.h"
#include "runtime/cuda/graph.h"

namespace fp8kit::testing {
namespace {

class DecodeGraph : public ::testing::TestWithParam<DType> {};

TEST_P(DecodeGraph, ReplaysForOtherLengths) {
  FP8KIT_REQUIRE_GPU();
  const KvCacheCase s{4, 700, 8, 2, 128, GetParam()};
  const int64_t batch = 3;
  ops::Context cpu(Device::Cpu), gpu(Device::Cuda);
  const ops::KvCacheLayer cpu_cache = random_cache(cpu, s, 21, 4.0f), gpu_cache = random_cache(gpu, s, 21, 4.0f);
  const std::vector<float> q_values = random_values(batch * s.heads * s.head_dim, 23, -1.0f, 1.0f);
  const Tensor cpu_q = device_tensor(q_values, {batch, s.heads * s.head_dim}, Device::Cpu, DType::Bf16);
  const Tensor gpu_q = cpu_q.to(Device::Cuda);
  Tensor slots = device_ints({0, 1, 2}, {batch}, Device::Cuda), lengths = device_ints({5, 5, 5}, {batch}, Device::Cuda);
  Tensor out, eager;
  // The eager call sizes the lane's scratch; the capture allocates nothing.
  ops::decode_attention(gpu, gpu_q, gpu_cache, slots, lengths, s.heads, 0.0f, out);
  gpu.synchronize();
  const cuda::Graph graph = cuda::Graph::capture(ops::stream(gpu), [&] {
    ops::decode_attention(gpu, gpu_q, gpu_cache, slots, lengths, s.heads, 0.0f, out);
  });

  const std::vector<std::vector<int32_t>> steps = {{1, 2, 3}, {256, 257, 511}, {700, 1, 699}, {129, 700, 64}};
  const std::vector<std::vector<int32_t>> slot_steps = {{0, 1, 2}, {3, 1, 0}, {2, 3, 1}, {1, 0, 3}};
  for (size_t step = 0; step < steps.size(); ++step) {
    slots.copy_from_host(slot_steps[step].data());
    lengths.copy_from_host(steps[step].data());
    graph.launch(ops::stream(gpu));
    gpu.synchronize();
    const std::vector<float> replayed = float_values(out);
    ops::decode_attention(gpu, gpu_q, gpu_cache, slots, lengths, s.heads, 0.0f, eager);
    gpu.synchronize();
    EXPECT_TRUE(cuda::testing::same_bits(replayed, float_values(eager))) << "step " << step;

    Tensor want;
    ops::decode_attention(cpu, cpu_q, cpu_cache, device_ints(slot_steps[step], {batch}, Device::Cpu),
                          device_ints(steps[step], {batch}, Device::Cpu), s.heads, 0.0f, want);
    const std::vector<float> w = float_values(want);
    for (size_t i = 0; i < w.size(); ++i) {
      ASSERT_NEAR(replayed[i], w[i], 2e-3 + 1e-2 * std::fabs(w[i])) << "step " << step << " element " << i;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Caches, DecodeGraph, ::testing::Values(DType::Bf16, DType::E4M3),
                         [](const ::testing::TestParamInfo<DType>& info) { return std::string(name(info.param)); });

}  // namespace
}  // namespace fp8kit::testing
