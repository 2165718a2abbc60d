// The Fp8Block Linear's backward reads its output gradient only on the lane it is called on: the
// weight gradient on the side lane works from the Linear's own copies, so the caller may write over
// dy as soon as linear_backward returns (the Llama's blocks share their gradient buffers and write
// them while the side lane may still be behind). The side lane is held back by a host function until
// Main has zeroed dy; the weight gradient must be the one of the unchanged dy.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <random>
#include <thread>
#include <vector>

#include "ops/cuda/context.h"
#include "ops/cuda/gpu_test.h"
#include "ops/linear.h"
#include "runtime/cuda/check.h"
#include "tensor/tensor.h"

namespace fp8kit::ops {
namespace {

Tensor random_tensor(std::vector<int64_t> shape, uint32_t seed, float scale) {
  Tensor t(shape, DType::F32);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  for (float& v : t.span<float>()) v = normal(rng);
  return t.to(Device::Cuda);
}

// Blocks the stream it is queued on until `open` is set (or a second has passed: never a hang).
void CUDART_CB hold(void* open) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
  while (!static_cast<std::atomic<bool>*>(open)->load() && std::chrono::steady_clock::now() < until)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

TEST(LinearFp8BlockLanes, TheWeightGradientDoesNotReadDyAfterTheBackwardReturns) {
  FP8KIT_REQUIRE_GPU();
  const int64_t rows = 256, in = 256, out = 384;
  Context c(Device::Cuda);
  Tensor w = random_tensor({out, in}, 1, 0.02f), dw({out, in}, DType::F32, Device::Cuda);
  const Tensor x = random_tensor({rows, in}, 2, 1.0f);
  Tensor dy = random_tensor({rows, out}, 3, 1e-3f);
  LinearOp l;  // bias-free, as the Llama's projections: g is dy itself
  l.in = in;
  l.out = out;
  l.layout = LinearOp::Layout::OutIn;
  l.precision = LinearPrecision::Fp8Block;
  l.w = &w;
  l.dw = &dw;
  LinearOp* op = &l;
  const LinearGradient g{&l, &dy};
  auto step = [&] {
    linear_prepare_weights(c, {&op, 1}, true);
    linear_forward(c, l, x, true);
    linear_backward(c, {&g, 1});
  };
  step();  // sizes every buffer: the held step below allocates (and synchronizes) nothing
  c.join_all();
  c.synchronize();
  const Tensor want = dw.to(Device::Cpu);

  std::atomic<bool> open{false};
  c.fork(Lane::Side);
  FP8KIT_CUDA_CHECK(cudaLaunchHostFunc(stream(c, Lane::Side), hold, &open));
  step();
  FP8KIT_CUDA_CHECK(cudaMemsetAsync(dy.device_data<float>(), 0, dy.nbytes(), stream(c, Lane::Main)));
  FP8KIT_CUDA_CHECK(cudaStreamSynchronize(stream(c, Lane::Main)));  // dy is zero before the side lane goes on
  open = true;
  c.join_all();
  c.synchronize();
  const Tensor got = dw.to(Device::Cpu);
  EXPECT_TRUE(std::equal(got.span<float>().begin(), got.span<float>().end(), want.span<float>().begin()))
      << "the weight gradient read dy after linear_backward returned";
}

}  // namespace
}  // namespace fp8kit::ops
