// SeedClassifierCuda's training steps are deterministic (no atomics anywhere in the step): two
// identical runs give the same bits, and a run stopped after some steps, its state stored into CPU
// objects (as the trainer's checkpoints do), with an evaluation in between, and loaded into a fresh GPU
// model continues bit for bit as the uninterrupted run: every weight, last gradient, Adam moment and
// FP8 scale and amax history, for every precision and FP8 recipe.
#include "models/seed_classifier_cuda.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "models/seed_classifier.h"
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

// A CPU model and its Adam: what checkpoints are written from and read into.
struct Host {
  std::unique_ptr<SeedClassifier> model;
  std::unique_ptr<optim::Adam> adam;
};

Host make_host(const Case& c, uint64_t init_seed) {
  Host h;
  h.model = std::make_unique<SeedClassifier>(small_config(), init_seed);
  h.model->set_precision(c.precision, c.recipe);
  h.adam = std::make_unique<optim::Adam>(h.model->parameters());
  return h;
}

using StateBits = std::map<std::string, std::vector<uint32_t>>;

// The GPU's whole training state (and last gradients), stored into `host`, as raw bits by name.
StateBits state_bits(const SeedClassifierCuda& gpu, Host& host) {
  gpu.store_state(*host.model, *host.adam);
  StateBits bits;
  const auto add = [&](const std::string& name, std::span<const float> values) {
    std::vector<uint32_t>& b = bits[name];
    for (float v : values) b.push_back(std::bit_cast<uint32_t>(v));
  };
  for (const nn::Parameter* p : host.model->parameters()) {
    add(p->name, p->value);
    add(p->name + " (gradient)", p->grad);
  }
  for (const nn::StateEntry& e : host.model->fp8_state()) add(e.name, e.data);
  for (const nn::StateEntry& e : host.adam->state()) add("adam " + e.name, e.data);
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

class SeedClassifierCudaResumeTest : public ::testing::TestWithParam<Case> {};

TEST_P(SeedClassifierCudaResumeTest, TwoRunsAgreeAndResumingIsBitExact) {
  FP8KIT_REQUIRE_GPU();
  const Case& c = GetParam();
  const std::vector<Batch> batches = make_batches(small_config());

  // Uninterrupted, twice.
  const auto straight = [&](std::vector<float>& losses) {
    Host host = make_host(c, kSeed);
    SeedClassifierCuda gpu(*host.model, kSeed, kBatch);
    for (const Batch& b : batches) losses.push_back(gpu.train_step(b.tokens, b.labels));
    return state_bits(gpu, host);
  };
  std::vector<float> losses_a, losses_b;
  const StateBits a = straight(losses_a), b = straight(losses_b);
  EXPECT_EQ(loss_bits(losses_b), loss_bits(losses_a)) << "two runs, losses";
  expect_same_bits(b, a, "two runs");

  // Stopped after kStop steps (then an evaluation), stored into the host objects, loaded into a fresh
  // GPU model built from a differently initialised CPU model, continued.
  Host host = make_host(c, kSeed);
  std::vector<float> losses;
  {
    SeedClassifierCuda gpu(*host.model, kSeed, kBatch);
    for (int s = 0; s < kStop; ++s) losses.push_back(gpu.train_step(batches[s].tokens, batches[s].labels));
    gpu.predict(batches[kSteps - 1].tokens);
    gpu.store_state(*host.model, *host.adam);
  }
  Host other = make_host(c, kSeed + 1);
  SeedClassifierCuda resumed(*other.model, kSeed, kBatch);
  resumed.load_state(*host.model, *host.adam);
  EXPECT_EQ(resumed.step(), static_cast<uint64_t>(kStop));
  for (int s = kStop; s < kSteps; ++s) losses.push_back(resumed.train_step(batches[s].tokens, batches[s].labels));
  EXPECT_EQ(loss_bits(losses), loss_bits(losses_a)) << "resumed, losses";
  expect_same_bits(state_bits(resumed, host), a, "resumed");
}

Fp8Recipe recipe(ScalingMode mode, ScalingLag lag) {
  Fp8Recipe r;
  r.mode = mode;
  r.lag = lag;
  return r;
}

INSTANTIATE_TEST_SUITE_P(
    Precisions, SeedClassifierCudaResumeTest,
    ::testing::Values(Case{"fp32", nn::Precision::Fp32, {}}, Case{"bf16", nn::Precision::Bf16, {}},
                      Case{"fp8_te", nn::Precision::Fp8, recipe(ScalingMode::Delayed, ScalingLag::Te)},
                      Case{"fp8_keras", nn::Precision::Fp8, recipe(ScalingMode::Delayed, ScalingLag::Keras)},
                      Case{"fp8_current", nn::Precision::Fp8, recipe(ScalingMode::Current, ScalingLag::Te)}),
    [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace fp8kit::models
