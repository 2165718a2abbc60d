// The seed model on the GPU against the same model on the CPU (llm.c's habit): the same weights (one
// seed), batch and dropout step, one eager step (loss, every gradient, the Adam update) and then two
// steps replayed from a captured graph, for fp32, bf16 and FP8 (delayed scaling with the te and keras
// lags, and current scaling). Errors are relative L2 over all parameters together.
// Tolerances, from the errors measured on an H200 and an H100 (2026-11-21) with 10-40x headroom:
// fp32 differs only by summation order (cuBLASLt vs OpenBLAS, warp trees): gradients 4e-7 (bound
// 1e-5), the change of the weights over 3 steps 1e-6 (bound 1e-4). bf16 and FP8 amplify such
// differences where a value lands on the other side of a bf16 / FP8 rounding boundary: gradients
// 2e-5 (bf16, bound 1e-3) and 2.5e-6 (FP8, bound 1e-4; its forward and dgrad GEMMs are one tensor-core
// instruction per output over k = 32, quantize_fp8_gemm, about as exact as the CPU's). Adam's first
// updates are ~lr * sign(g), so each gradient near 0 whose sign differs moves a weight by up to 2 lr:
// weight changes 1.5e-2 (bf16, bound 0.1), 1.5e-3 to 5e-3 (FP8, bound 0.05). FP8 current scaling takes
// each gradient's scale from its own amax, so a small difference between the devices' gradients can
// move a whole tensor's E5M2 grid: gradients 8.5e-6 (bound 1e-4), the weights' change 1.8e-2 (bound
// 0.1). The forward's amaxes and scales agree bit for bit (checked below).
#include "models/seed_classifier.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "exec/captured_step.h"
#include "ops/cuda/gpu_test.h"
#include "optim/adam.h"

namespace fp8kit::models {
namespace {

std::vector<float> host_values(const Tensor& t) {
  const Tensor h = t.to(Device::Cpu);
  return {h.data<float>(), h.data<float>() + h.numel()};
}

std::vector<float> flat(SeedClassifier& model, bool grads) {
  model.context().synchronize();
  std::vector<float> out;
  for (const nn::Parameter* p : model.parameters()) {
    const std::vector<float> v = host_values(grads ? p->grad : p->value);
    out.insert(out.end(), v.begin(), v.end());
  }
  return out;
}

std::vector<float> minus(const std::vector<float>& a, const std::vector<float>& b) {
  std::vector<float> d(a.size());
  for (size_t i = 0; i < a.size(); ++i) d[i] = a[i] - b[i];
  return d;
}

struct Case {
  std::string name;
  nn::Precision precision;
  Fp8Recipe recipe;
  double loss, grads, weights;
};

class SeedClassifierGpuTest : public ::testing::TestWithParam<Case> {};

TEST_P(SeedClassifierGpuTest, StepsMatchTheCpuModel) {
  FP8KIT_REQUIRE_GPU();
  const Case& c = GetParam();
  constexpr int kBatch = 32;
  constexpr uint64_t kSeed = 11;
  const SeedClassifierConfig config;
  SeedClassifier cpu(config, kSeed), gpu(config, kSeed, Device::Cuda);
  cpu.set_precision(c.precision, c.recipe);
  gpu.set_precision(c.precision, c.recipe);

  std::mt19937 rng(5);
  auto batch = [&](std::vector<int32_t>& tokens, std::vector<float>& labels) {
    tokens.resize(kBatch * config.sequence_length);
    labels.resize(kBatch);
    for (int32_t& t : tokens) t = rng() % 4 == 0 ? 0 : static_cast<int32_t>(rng() % config.vocabulary_size);
    for (float& l : labels) l = static_cast<float>(rng() % 2);
  };
  std::vector<int32_t> tokens;
  std::vector<float> labels;
  batch(tokens, labels);

  // Evaluation forward.
  const auto cpu_probs = cpu.forward(tokens, kBatch, false, 0);
  const std::vector<float> want_probs(cpu_probs.begin(), cpu_probs.end());
  const auto gpu_probs = gpu.forward(tokens, kBatch, false, 0);
  const double e_predict =
      cuda::testing::relative_l2(std::vector<float>(gpu_probs.begin(), gpu_probs.end()), want_probs);
  std::printf("%s predict: measured error %.2e\n", c.name.c_str(), e_predict);
  EXPECT_LT(e_predict, c.grads);

  // Step 0, eager: loss and gradients, then the update.
  const std::vector<float> w0 = flat(cpu, false);
  optim::Adam cpu_adam(cpu.parameter_set()), gpu_adam(gpu.parameter_set());
  cpu.forward(tokens, kBatch, true, 0);
  const float cpu_loss = cpu.backward(labels);
  gpu.forward(tokens, kBatch, true, 0);
  const float gpu_loss = gpu.backward(labels);
  const double e_loss = std::abs(gpu_loss - cpu_loss) / std::abs(cpu_loss);
  const double e_grads = cuda::testing::relative_l2(flat(gpu, true), flat(cpu, true));
  std::printf("%s step 0: loss cpu %.7f gpu %.7f, measured error loss %.2e gradients %.2e\n", c.name.c_str(), cpu_loss,
              gpu_loss, e_loss, e_grads);
  EXPECT_LT(e_loss, c.loss);
  EXPECT_LT(e_grads, c.grads);
  if (c.precision == nn::Precision::Fp8) {
    // The weights are the same on both devices, so their amaxes (and with current scaling their
    // scales, computed on the GPU) are the CPU's bits; with current scaling, so are the forward's
    // input amaxes and scales at this step.
    gpu.context().synchronize();
    const nn::HostState want(cpu.fp8_state()), got(gpu.fp8_state());
    ASSERT_EQ(got.entries().size(), want.entries().size());
    for (size_t i = 0; i < want.entries().size(); ++i) {
      const std::string& name = want.entries()[i].name;
      const bool current = c.recipe.mode == ScalingMode::Current;
      if (!name.ends_with("kernel_amax_history") &&
          !(current && (name.ends_with("kernel_scale") || name.find("/inputs_") != std::string::npos)))
        continue;
      ASSERT_EQ(got.entries()[i].name, name);
      std::vector<uint32_t> got_bits, want_bits;
      for (float v : got.entries()[i].data) got_bits.push_back(std::bit_cast<uint32_t>(v));
      for (float v : want.entries()[i].data) want_bits.push_back(std::bit_cast<uint32_t>(v));
      EXPECT_EQ(got_bits, want_bits) << name;
    }
  }
  cpu_adam.step(cpu.context());
  gpu_adam.step(gpu.context());
  const double e_update = cuda::testing::relative_l2(minus(flat(gpu, false), w0), minus(flat(cpu, false), w0));
  std::printf("%s step 0: measured error update %.2e\n", c.name.c_str(), e_update);
  EXPECT_LT(e_update, c.weights);

  // Steps 1 and 2 from a captured graph (eager at its first run, captured at its second: steps 1 and
  // 2 run the same work), new batches and dropout masks.
  Tensor device_tokens({kBatch, config.sequence_length}, DType::I32, Device::Cuda);
  Tensor device_labels({kBatch}, DType::F32, Device::Cuda);
  exec::CapturedStep step_graph([&](ops::Context& context) {
    gpu.forward_backward(device_tokens, device_labels);
    gpu_adam.step(context, /*advance_step=*/true);
  });
  gpu.context().set_step(1);
  for (uint64_t step = 1; step <= 2; ++step) {
    batch(tokens, labels);
    cpu.forward(tokens, kBatch, true, step);
    const float want = cpu.backward(labels);
    cpu_adam.step(cpu.context());
    Tensor host_tokens({kBatch, config.sequence_length}, DType::I32);
    std::copy(tokens.begin(), tokens.end(), host_tokens.data<int32_t>());
    device_tokens.copy_from(host_tokens);
    Tensor host_labels({kBatch}, DType::F32);
    std::copy(labels.begin(), labels.end(), host_labels.data<float>());
    device_labels.copy_from(host_labels);
    step_graph.run(gpu.context());
    gpu.context().synchronize();
    const float got = host_values(gpu.loss())[0];
    std::printf("%s step %lu: loss cpu %.7f gpu %.7f\n", c.name.c_str(), static_cast<unsigned long>(step), want, got);
    EXPECT_LT(std::abs(got - want) / std::abs(want), 10 * c.loss) << "step " << step;
  }
  EXPECT_EQ(gpu.context().step(), 3u);
  EXPECT_EQ(gpu_adam.iterations(), 3);
  const double e_weights = cuda::testing::relative_l2(minus(flat(gpu, false), w0), minus(flat(cpu, false), w0));
  std::printf("%s step 2: measured error of the weights' change %.2e\n", c.name.c_str(), e_weights);
  EXPECT_LT(e_weights, c.weights);
}

Fp8Recipe keras_lag() {
  Fp8Recipe r;
  r.lag = ScalingLag::Keras;
  return r;
}

Fp8Recipe current_scaling() {
  Fp8Recipe r;
  r.mode = ScalingMode::Current;
  return r;
}

INSTANTIATE_TEST_SUITE_P(Precisions, SeedClassifierGpuTest,
                         ::testing::Values(Case{"fp32", nn::Precision::Fp32, {}, 1e-5, 1e-5, 1e-4},
                                           Case{"bf16", nn::Precision::Bf16, {}, 1e-3, 1e-3, 0.1},
                                           Case{"fp8_te", nn::Precision::Fp8, {}, 1e-3, 1e-4, 0.05},
                                           Case{"fp8_keras", nn::Precision::Fp8, keras_lag(), 1e-3, 1e-4, 0.05},
                                           Case{"fp8_current", nn::Precision::Fp8, current_scaling(), 1e-3, 1e-4,
                                                0.1}),
                         [](const auto& info) { return info.param.name; });

TEST(SeedClassifierGpu, RejectsBadInput) {
  FP8KIT_REQUIRE_GPU();
  SeedClassifier gpu(SeedClassifierConfig{}, 1, Device::Cuda);
  std::vector<int32_t> tokens(2 * 200, 0);
  gpu.forward(tokens, 2, true, 0);
  EXPECT_THROW(gpu.backward(std::vector<float>(3)), Error);
  tokens[5] = 20000;
  EXPECT_THROW(gpu.forward(tokens, 2, true, 0), Error);
}

}  // namespace
}  // namespace fp8kit::models
