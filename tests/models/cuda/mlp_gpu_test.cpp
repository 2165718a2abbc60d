// The lab's MLP on the GPU against the CPU: the same weights and data, three training steps (an eager
// one, then captured replays: forward with fc1's GELU deferred into fc2's cast, MSE, backward without
// fc1's dx, the FP8 scaling update, AdamW) in fp32, bf16 and FP8 with the lab's recipe, and inference
// in bf16 and FP8 (calibrated scales). Tolerances: relative L2 errors with headroom over fp32
// summation order, a bf16 step at rounding boundaries and, for FP8, Hopper's fast-accumulation fprop.
#include "models/mlp.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <vector>

#include "exec/captured_step.h"
#include "ops/cuda/gpu_test.h"
#include "ops/init.h"
#include "ops/quant_stats.h"
#include "ops/scaling_table.h"

namespace fp8kit::models {
namespace {

constexpr MlpConfig kConfig{.input = 64, .hidden = 256, .output = 48};
constexpr int64_t kRows = 96;

std::vector<float> host(const Tensor& t) {
  const Tensor h = t.to(Device::Cpu);
  if (h.dtype() == DType::F32) return {h.data<float>(), h.data<float>() + h.numel()};
  std::vector<float> v;
  for (uint16_t b : h.span<uint16_t>()) v.push_back(std::bit_cast<float>(static_cast<uint32_t>(b) << 16));
  return v;
}

double rel(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (static_cast<double>(a[i]) - b[i]) * (static_cast<double>(a[i]) - b[i]);
    den += static_cast<double>(b[i]) * b[i];
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

struct DeviceRun {
  std::vector<float> losses, weights, output;
};

DeviceRun run(Device device, nn::Precision precision) {
  Fp8Recipe recipe;
  recipe.amax_history_length = 16;
  recipe.amax_algorithm = AmaxAlgorithm::MostRecent;
  optim::AdamOptions adam = lab_adamw();
  adam.learning_rate = 1e-3f;
  Mlp model(kConfig, 5, device, adam);
  model.set_precision(precision, recipe);
  ops::Context cpu;
  Tensor x({kRows, kConfig.input}, DType::F32), t({kRows, kConfig.output}, DType::F32),
      xb({kRows, kConfig.input}, DType::Bf16);
  ops::fill_normal(cpu, x, 1.0f, 6);  // the same values on either device: made on the host, copied
  ops::fill_normal(cpu, t, 1.0f, 7);
  ops::fill_normal(cpu, xb, 1.0f, 8);
  const Tensor xd = x.to(device), td = t.to(device), xbd = xb.to(device);
  DeviceRun r;
  exec::CapturedStep step([&](ops::Context&) { model.train_step(xd, td); });
  for (int s = 0; s < 3; ++s) {
    step.run(model.context());
    model.context().synchronize();
    r.losses.push_back(host(model.loss())[0]);
  }
  r.weights = host(model.parameter_set().values());
  if (precision != nn::Precision::Fp32) {
    model.prepare_inference(xbd);
    Tensor y;
    model.infer(xbd, y);
    model.context().synchronize();
    r.output = host(y);
  }
  return r;
}

TEST(MlpGpu, TrainingAndInferenceMatchTheCpu) {
  FP8KIT_REQUIRE_GPU();
  for (nn::Precision p : {nn::Precision::Fp32, nn::Precision::Bf16, nn::Precision::Fp8}) {
    const DeviceRun cpu = run(Device::Cpu, p), gpu = run(Device::Cuda, p);
    const double tol = p == nn::Precision::Fp32 ? 1e-4 : p == nn::Precision::Bf16 ? 5e-3 : 3e-2;
    for (size_t s = 0; s < cpu.losses.size(); ++s)
      EXPECT_NEAR(gpu.losses[s], cpu.losses[s], tol * cpu.losses[s]) << nn::name(p) << " step " << s;
    EXPECT_LT(rel(gpu.weights, cpu.weights), tol) << nn::name(p);
    if (p != nn::Precision::Fp32) {
      EXPECT_LT(rel(gpu.output, cpu.output), p == nn::Precision::Bf16 ? 1e-2 : 3e-2) << nn::name(p);
    }
  }
}

// FP8 health statistics of fc2's input are those of GELU's output on the GPU as on the CPU: while
// they are recorded, fc1's bias and GELU run in their own pass instead of inside fc2's cast, which
// never writes them back to fc1's y (the statistics would otherwise be those of x W).
TEST(MlpGpu, RecordedStatisticsOfFc2sInputAreOfGelusOutput) {
  FP8KIT_REQUIRE_GPU();
  std::vector<ops::QuantStats> stats[2];
  int slot = -1;
  for (Device device : {Device::Cpu, Device::Cuda}) {
    Mlp model(kConfig, 5, device);
    model.set_precision(nn::Precision::Fp8);
    ops::Context cpu;
    Tensor x({kRows, kConfig.input}, DType::F32), t({kRows, kConfig.output}, DType::F32);
    ops::fill_normal(cpu, x, 1.0f, 6);
    ops::fill_normal(cpu, t, 1.0f, 7);
    const Tensor xd = x.to(device), td = t.to(device);
    ops::ScalingTable& table = *model.scaling();
    for (int s = 0; s < table.size(); ++s)
      if (table.name(s) == "fc2/inputs") slot = s;
    ASSERT_GE(slot, 0);
    table.set_recording(true);
    model.train_step(xd, td);
    stats[device == Device::Cuda] = table.read_records(model.context());
  }
  const ops::QuantStatsRecord &cpu = stats[0][slot].raw, &gpu = stats[1][slot].raw;
  EXPECT_EQ(gpu.count, cpu.count);
  // GELU's output has no values below -0.17; x W's have (half of them negative), so its sum of squares
  // and amax are far from these.
  EXPECT_NEAR(gpu.amax, cpu.amax, 1e-2 * cpu.amax);
  EXPECT_NEAR(gpu.sum_squares, cpu.sum_squares, 1e-2 * cpu.sum_squares);
  EXPECT_NEAR(gpu.error_squares, cpu.error_squares, 0.1 * cpu.error_squares);
}

}  // namespace
}  // namespace fp8kit::models
