// The GPT layer on the GPU against the same layer on the CPU: the same weights (one seed), input and
// output gradient, three training steps (an eager forward + backward, then two captured replays; for
// FP8 the delayed scales of the earlier steps in use), in fp32, bf16 and FP8. Hidden 512 takes the
// GPU LayerNorm's block-per-row kernels, head dim 64 cuDNN's attention (bf16 operands, so even fp32
// differs from the CPU by bf16 rounding inside attention). Tolerances: relative L2 errors of what the
// layer adds (y - x, dx - dy) and of every parameter gradient together; the measured ones are printed.
#include "models/gpt_layer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "exec/captured_step.h"
#include "ops/cuda/gpu_test.h"
#include "ops/init.h"

namespace fp8kit::models {
namespace {

constexpr GptLayerConfig kConfig{.hidden = 512, .heads = 8, .ffn = 1024};
constexpr int64_t kBatch = 2, kSeq = 48, kRows = kBatch * kSeq;

std::vector<float> host(const Tensor& t) {
  const Tensor h = t.to(Device::Cpu);
  return {h.data<float>(), h.data<float>() + h.numel()};
}

// The relative L2 distance of a - base from b - base (base empty: 0).
double rel(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& base = {}) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double o = base.empty() ? 0.0 : base[i];
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += (b[i] - o) * (b[i] - o);
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

struct DeviceRun {
  std::vector<float> x, dy, y, dx, grads;
};

DeviceRun run(Device device, nn::Precision precision) {
  GptLayer layer(kConfig, 3, device);
  layer.set_precision(precision);
  ops::Context cpu;
  Tensor x({kRows, kConfig.hidden}, DType::F32), dy({kRows, kConfig.hidden}, DType::F32);
  ops::fill_normal(cpu, x, 1.0f, 4);  // the same values on either device: made on the host, copied
  ops::fill_normal(cpu, dy, 1.0f, 5);
  const Tensor xd = x.to(device), dyd = dy.to(device);
  const Tensor *y = nullptr, *dx = nullptr;
  exec::CapturedStep step([&](ops::Context&) {
    y = &layer.forward(xd, kBatch, kSeq, true);
    dx = &layer.backward(dyd);
  });
  for (int s = 0; s < 3; ++s) step.run(layer.context());
  layer.context().synchronize();
  return {host(x), host(dy), host(*y), host(*dx), host(layer.parameter_set().grads())};
}

TEST(GptLayerGpu, MatchesTheCpuLayer) {
  FP8KIT_REQUIRE_GPU();
  struct Case {
    nn::Precision precision;
    double y, dx, grads;
  };
  for (const Case k : {Case{nn::Precision::Fp32, 2e-2, 2e-2, 2e-2}, Case{nn::Precision::Bf16, 3e-2, 3e-2, 3e-2},
                       Case{nn::Precision::Fp8, 0.1, 0.1, 0.1}}) {
    const DeviceRun cpu = run(Device::Cpu, k.precision), gpu = run(Device::Cuda, k.precision);
    ASSERT_EQ(cpu.x, gpu.x);
    const double ey = rel(gpu.y, cpu.y, cpu.x), edx = rel(gpu.dx, cpu.dx, cpu.dy), eg = rel(gpu.grads, cpu.grads);
    const std::string what(nn::name(k.precision));
    std::printf("gpt_layer %s: y %.2e, dx %.2e, gradients %.2e\n", what.c_str(), ey, edx, eg);
    EXPECT_LT(ey, k.y) << what;
    EXPECT_LT(edx, k.dx) << what;
    EXPECT_LT(eg, k.grads) << what;
  }
}

}  // namespace
}  // namespace fp8kit::models
