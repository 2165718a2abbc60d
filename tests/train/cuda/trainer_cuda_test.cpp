// `fp8kit train --device cuda`'s trainer: one epoch on the GPU against the same epoch on the CPU
// (same seed, data order and dropout masks; the last batch is smaller, so a second CUDA graph runs),
// GPU evaluation against CPU evaluation of the same weights, and checkpoints that resume on either
// device (on the GPU bit for bit: the GPU step is deterministic). Tolerances: the epoch's mean
// training loss differs by summation order (fp32) and by values landing on the other side of a bf16 /
// FP8 rounding boundary (see the model test): bounds 1e-4 (fp32) and 2e-3 (bf16, FP8) on a loss of
// about 0.69; the measured differences are printed (H100: 6e-8 in each precision; the furthest apart,
// a CPU run resumed from the GPU's checkpoint against the straight one, 1e-4 in bf16, 3.5e-4 in FP8).
#include "train/trainer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>

#include "common/temp_dir.h"
#include "io/safetensors.h"
#include "ops/cuda/gpu_test.h"

namespace fp8kit::train {
namespace {

constexpr uint64_t kSeed = 5;
constexpr int kBatch = 32;

// Random tokens; the label is whether token 1 occurs more often than token 2 (learnable).
TokenDataset make_data(int64_t size, const models::SeedClassifierConfig& config, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> token(0, config.vocabulary_size - 1);
  TokenDataset data;
  data.sequence_length = config.sequence_length;
  for (int64_t i = 0; i < size; ++i) {
    int balance = 0;
    for (int t = 0; t < config.sequence_length; ++t) {
      const int32_t id = token(rng);
      balance += (id == 1) - (id == 2);
      data.tokens.push_back(id);
    }
    data.labels.push_back(balance > 0 ? 1.0f : 0.0f);
  }
  return data;
}

struct Case {
  std::string name;
  nn::Precision precision;
  ScalingLag lag;
  double loss_bound;
};

class TrainerCudaTest : public ::testing::TestWithParam<Case> {
 protected:
  TrainOptions options(bool gpu, const std::filesystem::path& out, int epochs) const {
    TrainOptions o;
    o.model.vocabulary_size = 1000;
    o.precision = GetParam().precision;
    o.recipe.lag = GetParam().lag;
    o.epochs = epochs;
    o.batch_size = kBatch;
    o.seed = kSeed;
    o.out = out;
    o.console = nullptr;
    if (gpu) o.device = Device::Cuda;
    return o;
  }
};

TEST_P(TrainerCudaTest, EpochMatchesTheCpuAndCheckpointsResumeOnEitherDevice) {
  FP8KIT_REQUIRE_GPU();
  const Case& c = GetParam();
  const models::SeedClassifierConfig config = options(false, "", 1).model;
  const TokenDataset train_data = make_data(100, config, 1);  // batches 32, 32, 32, 4
  const TokenDataset validation = make_data(50, config, 2);

  const testing::TempDir dir("trainer_cuda_" + c.name);
  const auto cpu_dir = dir / "cpu", gpu_dir = dir / "gpu";
  TrainResult cpu = train(options(false, cpu_dir, 1), train_data, &validation, nullptr);
  TrainResult gpu = train(options(true, gpu_dir, 1), train_data, &validation, nullptr);
  const double loss_difference = std::abs(cpu.epochs[0].loss - gpu.epochs[0].loss);
  std::printf("%s: epoch loss CPU %.6f GPU %.6f (difference %.2e), validation loss CPU %.6f GPU %.6f\n",
              c.name.c_str(), cpu.epochs[0].loss, gpu.epochs[0].loss, loss_difference, cpu.epochs[0].validation->loss,
              gpu.epochs[0].validation->loss);
  EXPECT_LT(loss_difference, c.loss_bound);
  EXPECT_LT(std::abs(cpu.epochs[0].validation->loss - gpu.epochs[0].validation->loss), 5 * c.loss_bound);

  // GPU evaluation against the CPU forward on the weights and FP8 state the GPU trained.
  models::SeedClassifier copy(config, kSeed);
  copy.set_precision(c.precision, options(false, "", 1).recipe);
  gpu.model.context().synchronize();
  for (size_t i = 0; i < copy.parameters().size(); ++i)
    copy.parameters()[i]->value.copy_from(gpu.model.parameters()[i]->value);
  const std::vector<nn::StateTensor> from = gpu.model.fp8_state(), to = copy.fp8_state();
  for (size_t i = 0; i < to.size(); ++i) to[i].tensor->copy_from(*from[i].tensor);
  if (copy.scaling() != nullptr) copy.scaling()->restored(copy.context());
  const Evaluation on_cpu = evaluate(copy, validation, kBatch);
  std::printf("%s: validation of the GPU's weights: GPU %.7f CPU %.7f\n", c.name.c_str(),
              gpu.epochs[0].validation->loss, on_cpu.loss);
  EXPECT_NEAR(gpu.epochs[0].validation->loss, on_cpu.loss, c.loss_bound);

  // Same tensor names on both devices.
  const auto names = [](const std::filesystem::path& file) {
    std::vector<std::string> keys;
    for (const io::StoredTensor& t : io::read_safetensors(file).tensors) keys.push_back(t.name);
    std::sort(keys.begin(), keys.end());
    return keys;
  };
  ASSERT_TRUE(gpu.checkpoint && cpu.checkpoint);
  EXPECT_EQ(names(*gpu.checkpoint), names(*cpu.checkpoint));

  // Two GPU epochs in one go, and resumed after the first: on the GPU and on the CPU.
  const auto straight_dir = dir / "straight";
  const TrainResult straight = train(options(true, straight_dir, 2), train_data, &validation, nullptr);
  const auto cpu_resume_dir = dir / "cpu-resume";
  std::filesystem::create_directories(cpu_resume_dir);
  std::filesystem::copy(*gpu.checkpoint, cpu_resume_dir);
  TrainOptions resume = options(true, gpu_dir, 2);
  resume.resume = true;
  const TrainResult gpu_resumed = train(resume, train_data, &validation, nullptr);
  TrainOptions cpu_resume = options(false, cpu_resume_dir, 2);
  cpu_resume.resume = true;
  const TrainResult cpu_resumed = train(cpu_resume, train_data, &validation, nullptr);
  ASSERT_EQ(gpu_resumed.epochs.size(), 1u);
  ASSERT_EQ(cpu_resumed.epochs.size(), 1u);
  std::printf("%s: epoch 2 loss straight %.7f, GPU resumed %.7f, CPU resumed %.7f\n", c.name.c_str(),
              straight.epochs[1].loss, gpu_resumed.epochs[0].loss, cpu_resumed.epochs[0].loss);
  EXPECT_EQ(gpu_resumed.epochs[0].loss, straight.epochs[1].loss);
  // Training accuracy from the replayed graphs' probabilities, after evaluations and the last batch's
  // graph (of 4 examples) ran between them.
  EXPECT_EQ(gpu_resumed.epochs[0].accuracy, straight.epochs[1].accuracy);
  EXPECT_NEAR(cpu_resumed.epochs[0].accuracy, straight.epochs[1].accuracy, 0.03);
  EXPECT_NEAR(cpu.epochs[0].accuracy, gpu.epochs[0].accuracy, 0.03);
  EXPECT_EQ(gpu_resumed.epochs[0].validation->loss, straight.epochs[1].validation->loss);
  EXPECT_NEAR(cpu_resumed.epochs[0].loss, straight.epochs[1].loss, c.loss_bound);
  // The GPU-resumed run's last checkpoint is the uninterrupted run's, tensor for tensor, bit for bit.
  ASSERT_TRUE(gpu_resumed.checkpoint && straight.checkpoint);
  const io::SafetensorsFile resumed_file = io::read_safetensors(*gpu_resumed.checkpoint);
  const io::SafetensorsFile straight_file = io::read_safetensors(*straight.checkpoint);
  ASSERT_EQ(resumed_file.tensors.size(), straight_file.tensors.size());
  for (size_t i = 0; i < straight_file.tensors.size(); ++i) {
    EXPECT_EQ(resumed_file.tensors[i].name, straight_file.tensors[i].name);
    EXPECT_TRUE(resumed_file.tensors[i].data == straight_file.tensors[i].data)
        << straight_file.tensors[i].name << " differs after resuming on the GPU";
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, TrainerCudaTest,
                         ::testing::Values(Case{"fp32", nn::Precision::Fp32, ScalingLag::Te, 1e-4},
                                           Case{"bf16", nn::Precision::Bf16, ScalingLag::Te, 2e-3},
                                           Case{"fp8_te", nn::Precision::Fp8, ScalingLag::Te, 2e-3},
                                           Case{"fp8_keras", nn::Precision::Fp8, ScalingLag::Keras, 2e-3}),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace fp8kit::train
