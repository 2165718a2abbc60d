// The GPU training step against the CPU model (llm.c's habit): the same weights, batch and dropout
// step, one eager step (loss, every gradient, the Adam update) and then two graph-replayed steps,
// for fp32, bf16 and FP8 (delayed scaling with the te and keras lags, and current scaling; current
// scaling has its own bounds, below). Errors are relative L2 over all parameters together.
// Tolerances, from the errors measured on an H200 and an H100 (2026-11-21) with 10-40x headroom:
// fp32 differs only by summation order (cuBLASLt vs OpenBLAS, warp trees): gradients 4e-7 (bound
// 1e-5), the change of the weights over 3 steps 1e-6 (bound 1e-4). bf16 and FP8 amplify such
// differences where a value lands on the other side of a bf16 / FP8 rounding boundary: gradients
// 2e-5 (bf16, bound 1e-3) and 2.5e-6 (FP8, bound 1e-4; its forward and dgrad GEMMs are one tensor-core
// instruction per output over k = 32, quantize_fp8_gemm, about as exact as the CPU's; with cuBLASLt's
// FP8 GEMMs it was 8e-4). Adam's first updates are ~lr * sign(g), so each gradient near 0 whose sign
// differs moves a weight by up to 2 lr: weight changes 1.5e-2 (bf16, bound 0.1), 1.5e-3 to 5e-3
// (FP8, bound 0.05). FP8 current scaling takes each gradient's scale from its own amax, so a small
// difference between the devices' gradients can move a whole tensor's E5M2 grid (with cuBLASLt's
// GEMMs the amaxes differed by 0.3% to 8% and the gradients by 0.11); with the MMA kernel: gradients
// 8.5e-6 (bound 1e-4), the weights' change 1.8e-2 (bound 0.1). The forward's amaxes and scales agree
// bit for bit (checked below).
#include "models/seed_classifier_cuda.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "models/seed_classifier.h"
#include "ops/cuda/gpu_test.h"
#include "optim/adam.h"

namespace fp8kit::models {
namespace {

std::vector<float> flat(const std::vector<nn::Parameter*>& ps, bool grads) {
  std::vector<float> out;
  for (const nn::Parameter* p : ps) {
    const std::vector<float>& v = grads ? p->grad : p->value;
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

class SeedClassifierCudaTest : public ::testing::TestWithParam<Case> {};

TEST_P(SeedClassifierCudaTest, StepsMatchTheCpuModel) {
  FP8KIT_REQUIRE_GPU();
  const Case& c = GetParam();
  constexpr int kBatch = 32;
  constexpr uint64_t kSeed = 11;
  const SeedClassifierConfig config;
  SeedClassifier cpu(config, kSeed), mirror(config, kSeed);
  cpu.set_precision(c.precision, c.recipe);
  mirror.set_precision(c.precision, c.recipe);
  SeedClassifierCuda gpu(cpu, kSeed, kBatch);

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
  const double e_predict =
      cuda::testing::relative_l2(gpu.predict(tokens), std::vector<float>(cpu_probs.begin(), cpu_probs.end()));
  std::printf("%s predict: measured error %.2e\n", c.name.c_str(), e_predict);
  EXPECT_LT(e_predict, c.grads);

  // Step 0, eager: loss and gradients, then the update.
  const std::vector<float> w0 = flat(cpu.parameters(), false);
  optim::Adam adam(cpu.parameters());
  cpu.forward(tokens, kBatch, true, 0);
  const float cpu_loss = cpu.backward(labels);
  const float gpu_loss = gpu.forward_backward(tokens, labels);
  gpu.copy_to(mirror);
  const double e_loss = std::abs(gpu_loss - cpu_loss) / std::abs(cpu_loss);
  const double e_grads = cuda::testing::relative_l2(flat(mirror.parameters(), true), flat(cpu.parameters(), true));
  std::printf("%s step 0: loss cpu %.7f gpu %.7f, measured error loss %.2e gradients %.2e\n", c.name.c_str(), cpu_loss,
              gpu_loss, e_loss, e_grads);
  for (size_t i = 0; i < cpu.parameters().size(); ++i) {
    const double e = cuda::testing::relative_l2(mirror.parameters()[i]->grad, cpu.parameters()[i]->grad);
    if (e > c.grads) std::printf("  %s gradient error %.2e\n", cpu.parameters()[i]->name.c_str(), e);
  }
  EXPECT_LT(e_loss, c.loss);
  EXPECT_LT(e_grads, c.grads);
  if (c.precision == nn::Precision::Fp8) {
    // The weights are the same on both devices, so their amaxes (and with current scaling their
    // scales, computed on the GPU) are the CPU's bits; with current scaling, so are the forward's
    // input amaxes and scales at this step (the forward's tiny differences do not reach them here).
    optim::Adam mirror_adam(mirror.parameters());
    gpu.store_state(mirror, mirror_adam);
    const std::vector<nn::StateEntry> want = cpu.fp8_state(), got = mirror.fp8_state();
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      const std::string& name = want[i].name;
      const bool current = c.recipe.mode == ScalingMode::Current;
      if (!name.ends_with("kernel_amax_history") &&
          !(current && (name.ends_with("kernel_scale") || name.find("/inputs_") != std::string::npos)))
        continue;
      ASSERT_EQ(got[i].name, name);
      std::vector<uint32_t> got_bits, want_bits;
      for (float v : got[i].data) got_bits.push_back(std::bit_cast<uint32_t>(v));
      for (float v : want[i].data) want_bits.push_back(std::bit_cast<uint32_t>(v));
      EXPECT_EQ(got_bits, want_bits) << name;
    }
  }
  adam.step();
  gpu.update();
  gpu.copy_to(mirror);
  const double e_update = cuda::testing::relative_l2(minus(flat(mirror.parameters(), false), w0),
                                                     minus(flat(cpu.parameters(), false), w0));
  std::printf("%s step 0: measured error update %.2e\n", c.name.c_str(), e_update);
  EXPECT_LT(e_update, c.weights);

  // Steps 1 and 2 from the graph (captured at the first call), new batches and dropout masks.
  for (uint64_t step = 1; step <= 2; ++step) {
    batch(tokens, labels);
    cpu.forward(tokens, kBatch, true, step);
    const float want = cpu.backward(labels);
    adam.step();
    const float got = gpu.train_step(tokens, labels);
    std::printf("%s step %lu: loss cpu %.7f gpu %.7f\n", c.name.c_str(), static_cast<unsigned long>(step), want, got);
    EXPECT_LT(std::abs(got - want) / std::abs(want), 10 * c.loss) << "step " << step;
  }
  EXPECT_EQ(gpu.step(), 3u);
  gpu.copy_to(mirror);
  const double e_weights = cuda::testing::relative_l2(minus(flat(mirror.parameters(), false), w0),
                                                      minus(flat(cpu.parameters(), false), w0));
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

INSTANTIATE_TEST_SUITE_P(Precisions, SeedClassifierCudaTest,
                         ::testing::Values(Case{"fp32", nn::Precision::Fp32, {}, 1e-5, 1e-5, 1e-4},
                                           Case{"bf16", nn::Precision::Bf16, {}, 1e-3, 1e-3, 0.1},
                                           Case{"fp8_te", nn::Precision::Fp8, {}, 1e-3, 1e-4, 0.05},
                                           Case{"fp8_keras", nn::Precision::Fp8, keras_lag(), 1e-3, 1e-4, 0.05},
                                           Case{"fp8_current", nn::Precision::Fp8, current_scaling(), 1e-3, 1e-4,
                                                0.1}),
                         [](const auto& info) { return info.param.name; });

TEST(SeedClassifierCuda, RejectsBadInput) {
  FP8KIT_REQUIRE_GPU();
  SeedClassifier cpu(SeedClassifierConfig{}, 1);
  SeedClassifierCuda gpu(cpu, 1, 2);
  std::vector<int32_t> tokens(2 * 200, 0);
  EXPECT_THROW(gpu.forward_backward(tokens, std::vector<float>(3)), Error);
  tokens[5] = 20000;
  EXPECT_THROW(gpu.forward_backward(tokens, std::vector<float>(2)), Error);
}

}  // namespace
}  // namespace fp8kit::models
