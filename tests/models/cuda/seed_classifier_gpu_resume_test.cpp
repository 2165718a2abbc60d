// The seed model's GPU training steps (captured graphs) are deterministic (no atomics anywhere in the
// step): two identical runs give the same bits, and a run stopped after some steps, its state copied
// to the host (as the trainer's checkpoints do), with an evaluation in between, and loaded into a fresh
// GPU model continues bit for bit as the uninterrupted run: every weight, last gradient, Adam moment
// and FP8 scale and amax history, for every precision and FP8 recipe.
#include "models/seed_classifier.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "exec/captured_step.h"
#include "ops/cuda/gpu_test.h"
#include "optim/adam.h"

namespace fp8kit::models {
namespace {

constexpr int kBatch = 8;
constexpr uint64_t kSeed = 3;
constexpr int kSteps = 5, kStop = 2;

struct Case {
  std::string name;
  nn::Precision precision;
  Fp8Recipe recipe;
};

struct Batch {
  std::vector<int32_t> tokens;
  std::vector<float> labels;
};

SeedClassifierConfig small_config() {
  SeedClassifierConfig config;
  config.vocabulary_size = 1000;
  return config;
}

// kSteps batches; token 0 (padding) on about a quarter of the positions.
std::vector<Batch> make_batches(const SeedClassifierConfig& config) {
  std::mt19937 rng(7);
  std::vector<Batch> batches(kSteps);
  for (Batch& b : batches) {
    b.tokens.resize(static_cast<size_t>(kBatch * config.sequence_length));
    for (int32_t& t : b.tokens) t = rng() % 4 == 0 ? 0 : static_cast<int32_t>(rng() % config.vocabulary_size);
    b.labels.resize(kBatch);
    for (float& l : b.labels) l = static_cast<float>(rng() % 2);
  }
  return batches;
}

// A GPU model, its Adam, and its training steps as captured graphs.
struct Training {
  std::unique_ptr<SeedClassifier> model;
  std::unique_ptr<optim::Adam> adam;
  Tensor tokens{{kBatch, 200}, DType::I32, Device::Cuda}, labels{{kBatch}, DType::F32, Device::Cuda};
  std::unique_ptr<exec::CapturedStep> steps;

  Training(const Case& c, uint64_t init_seed) {
    model = std::make_unique<SeedClassifier>(small_config(), init_seed, Device::Cuda);
    model->set_precision(c.precision, c.recipe);
    adam = std::make_unique<optim::Adam>(model->parameter_set());
    steps = std::make_unique<exec::CapturedStep>([this](ops::Context& context) {
      model->forward_backward(tokens, labels);
      adam->step(context, /*advance_step=*/true);
    });
  }

  float step(const Batch& b) {
    Tensor host_tokens({kBatch, 200}, DType::I32), host_labels({kBatch}, DType::F32);
    std::copy(b.tokens.begin(), b.tokens.end(), host_tokens.data<int32_t>());
    std::copy(b.labels.begin(), b.labels.end(), host_labels.data<float>());
    tokens.copy_from(host_tokens);
    labels.copy_from(host_labels);
    steps->run(model->context());
    model->context().synchronize();
    return model->loss().to(Device::Cpu).data<float>()[0];
  }

  std::vector<nn::StateTensor> state() {
    std::vector<nn::StateTensor> tensors;
    for (nn::Parameter* p : model->parameters()) {
      tensors.push_back({p->name, p->shape, &p->value});
      tensors.push_back({p->name + " (gradient)", p->shape, &p->grad});
    }
    for (nn::StateTensor& t : model->fp8_state()) tensors.push_back(t);
    for (nn::StateTensor& t : adam->state()) tensors.push_back({"adam " + t.name, t.shape, t.tensor, t.domain});
    return tensors;
  }
};

using StateBits = std::map<std::string, std::vector<uint32_t>>;

// The whole training state (and last gradients) as raw bits by name.
StateBits state_bits(Training& run) {
  run.model->context().synchronize();
  const nn::HostState host(run.state());
  StateBits bits;
  for (const nn::StateEntry& e : host.entries()) {
    std::vector<uint32_t>& b = bits[e.name];
    for (float v : e.data) b.push_back(std::bit_cast<uint32_t>(v));
  }
  return bits;
}

void expect_same_bits(const StateBits& got, const StateBits& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  int differing = 0;
  for (const auto& [name, bits] : want) {
    const auto it = got.find(name);
    ASSERT_NE(it, got.end()) << what << ": no " << name;
    if (it->second != bits && ++differing <= 5) ADD_FAILURE() << what << ": " << name << " differs";
  }
  EXPECT_EQ(differing, 0) << what << ": tensors that differ";
}

std::vector<uint32_t> loss_bits(const std::vector<float>& losses) {
  std::vector<uint32_t> bits;
  for (float l : losses) bits.push_back(std::bit_cast<uint32_t>(l));
  return bits;
}

class SeedClassifierGpuResumeTest : public ::testing::TestWithParam<Case> {};

TEST_P(SeedClassifierGpuResumeTest, TwoRunsAgreeAndResumingIsBitExact) {
  FP8KIT_REQUIRE_GPU();
  const Case& c = GetParam();
  const std::vector<Batch> batches = make_batches(small_config());

  // Uninterrupted, twice.
  const auto straight = [&](std::vector<float>& losses) {
    Training run(c, kSeed);
    for (const Batch& b : batches) losses.push_back(run.step(b));
    return state_bits(run);
  };
  std::vector<float> losses_a, losses_b;
  const StateBits a = straight(losses_a), b = straight(losses_b);
  EXPECT_EQ(loss_bits(losses_b), loss_bits(losses_a)) << "two runs, losses";
  expect_same_bits(b, a, "two runs");

  // Stopped after kStop steps (then an evaluation), copied to the host, loaded into another GPU model
  // (of the same seed, which keys the dropout masks) that has trained a step of its own on another
  // batch, continued.
  std::vector<float> losses;
  Training first(c, kSeed);
  for (int s = 0; s < kStop; ++s) losses.push_back(first.step(batches[s]));
  first.model->forward(batches[kSteps - 1].tokens, kBatch, false, kStop);
  first.model->context().synchronize();
  nn::HostState saved(first.state());
  Training resumed(c, kSeed);
  resumed.step(batches[kSteps - 1]);  // state the copy must overwrite entirely
  nn::HostState restore(resumed.state());
  ASSERT_EQ(restore.entries().size(), saved.entries().size());
  for (size_t i = 0; i < saved.entries().size(); ++i)
    std::copy(saved.entries()[i].data.begin(), saved.entries()[i].data.end(), restore.entries()[i].data.begin());
  restore.push();
  if (ops::ScalingTable* scaling = resumed.model->scaling()) scaling->restored(resumed.model->context());
  resumed.model->context().set_step(resumed.adam->iterations());
  EXPECT_EQ(resumed.model->context().step(), static_cast<uint64_t>(kStop));
  for (int s = kStop; s < kSteps; ++s) losses.push_back(resumed.step(batches[s]));
  EXPECT_EQ(loss_bits(losses), loss_bits(losses_a)) << "resumed, losses";
  expect_same_bits(state_bits(resumed), a, "resumed");
}

Fp8Recipe recipe(ScalingMode mode, ScalingLag lag) {
  Fp8Recipe r;
  r.mode = mode;
  r.lag = lag;
  return r;
}

INSTANTIATE_TEST_SUITE_P(
    Precisions, SeedClassifierGpuResumeTest,
    ::testing::Values(Case{"fp32", nn::Precision::Fp32, {}}, Case{"bf16", nn::Precision::Bf16, {}},
                      Case{"fp8_te", nn::Precision::Fp8, recipe(ScalingMode::Delayed, ScalingLag::Te)},
                      Case{"fp8_keras", nn::Precision::Fp8, recipe(ScalingMode::Delayed, ScalingLag::Keras)},
                      Case{"fp8_current", nn::Precision::Fp8, recipe(ScalingMode::Current, ScalingLag::Te)}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace fp8kit::models
