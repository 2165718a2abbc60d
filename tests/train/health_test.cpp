// FP8 health recording in both training loops on the CPU: recording every N steps leaves training
// bit for bit as it is (losses and weights, every per-tensor recipe), and the metrics log gets a
// "health" event at every N-th step and the last naming every FP8 slot of the scaling table, with sane values.
#include "train/health.h"
#include "train/lm_trainer.h"
#include "train/trainer.h"

#include "common/temp_dir.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace fp8kit::train {
namespace {

std::vector<nlohmann::json> events(const std::filesystem::path& log, const std::string& kind) {
  std::ifstream in(log);
  std::vector<nlohmann::json> out;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json e = nlohmann::json::parse(line);
    if (e.value("event", "") == kind) out.push_back(std::move(e));
  }
  return out;
}

std::vector<float> values(const Tensor& t) {
  const Tensor host = t.to(Device::Cpu);
  return {host.data<float>(), host.data<float>() + host.numel()};
}

// Every health event names every slot of `table`, in order, with finite fractions in [0, 1].
void expect_complete(const nlohmann::json& e, const ops::ScalingTable& table) {
  ASSERT_EQ(e["tensors"].size(), static_cast<size_t>(table.size()));
  for (int i = 0; i < table.size(); ++i) {
    EXPECT_EQ(e["tensors"][i], table.name(i));
    EXPECT_GT(e["count"][i].get<int64_t>(), 0) << table.name(i);
    EXPECT_GT(e["amax"][i].get<double>(), 0) << table.name(i);
    EXPECT_GT(e["scale"][i].get<double>(), 0) << table.name(i);
    for (const char* key : {"saturated", "flushed", "subnormal", "nonfinite"}) {
      const double f = e[key][i].get<double>();
      EXPECT_TRUE(f >= 0 && f <= 1) << key << " of " << table.name(i) << ": " << f;
    }
    EXPECT_TRUE(e["snr_db"][i].is_number()) << table.name(i);
  }
}

std::vector<Fp8Recipe> recipes() {
  Fp8Recipe delayed, keras, current;
  delayed.amax_history_length = keras.amax_history_length = 4;
  keras.lag = ScalingLag::Keras;
  current.mode = ScalingMode::Current;
  return {delayed, keras, current};
}

TEST(HealthSteps, EveryNthAndTheLast) {
  EXPECT_FALSE(records_health(0, 50, 1000));
  EXPECT_FALSE(records_health(0, 1000, 1000));  // 0: not even the last
  EXPECT_TRUE(records_health(50, 50, 1000));
  EXPECT_TRUE(records_health(50, 100, 1000));
  EXPECT_FALSE(records_health(50, 49, 1000));
  EXPECT_TRUE(records_health(50, 30, 30));  // a run shorter than every records its last step
  EXPECT_TRUE(records_health(50, 1030, 1030));
}

// --- the LM trainer

std::vector<int32_t> stream(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> s;
  for (size_t i = 0; i < n; ++i) s.push_back(static_cast<int32_t>(rng() % 23));
  return s;
}

LmTrainOptions lm_options(const std::filesystem::path& out, const Fp8Recipe& recipe, int64_t health_every) {
  LmTrainOptions o;
  o.model = models::llama_preset("tiny", 23);
  o.model.hidden_size = 32;
  o.model.intermediate_size = 64;
  o.model.head_dim = 8;
  o.model.max_position_embeddings = 32;
  o.precision = nn::Precision::Fp8;
  o.recipe = recipe;
  o.seq = 16;
  o.batch = 2;
  o.steps = 6;
  o.adam.learning_rate = 1e-2f;
  o.adam.warmup_steps = 2;
  o.eval_batches = 1;
  o.out = out;
  o.console = nullptr;
  o.health_every = health_every;
  return o;
}

TEST(LmHealth, RecordingLeavesTrainingExactlyAsItIs) {
  const auto train = stream(2000, 1), validation = stream(400, 2);
  for (const Fp8Recipe& recipe : recipes()) {
    SCOPED_TRACE(describe(recipe));
    testing::TempDir plain("lm_health_off"), recorded("lm_health_on");
    MetricsLog plain_log(plain / "metrics.jsonl", false), recorded_log(recorded / "metrics.jsonl", false);
    LmTrainOptions off = lm_options(plain.path(), recipe, 0), on = lm_options(recorded.path(), recipe, 2);
    off.metrics = &plain_log;
    on.metrics = &recorded_log;
    LmTrainResult a = train_lm(off, train, validation);
    LmTrainResult b = train_lm(on, train, validation);
    EXPECT_EQ(a.final_loss, b.final_loss);
    EXPECT_EQ(a.validation->loss, b.validation->loss);
    EXPECT_EQ(values(a.model.parameter_set().values()), values(b.model.parameter_set().values()));
    const auto losses_a = events(plain / "metrics.jsonl", "step"), losses_b = events(recorded / "metrics.jsonl", "step");
    ASSERT_EQ(losses_a.size(), losses_b.size());
    for (size_t i = 0; i < losses_a.size(); ++i) EXPECT_EQ(losses_a[i]["loss"], losses_b[i]["loss"]) << i;

    EXPECT_TRUE(events(plain / "metrics.jsonl", "health").empty());
    const auto health = events(recorded / "metrics.jsonl", "health");
    ASSERT_EQ(health.size(), 3u);
    const ops::ScalingTable& table = *b.model.scaling();
    EXPECT_EQ(table.size(), 3 * 7 * b.model.config().num_hidden_layers);
    for (size_t i = 0; i < health.size(); ++i) {
      EXPECT_EQ(health[i]["step"], 2 * (i + 1));
      EXPECT_EQ(health[i]["precision"], "fp8");
      expect_complete(health[i], table);
    }
    EXPECT_EQ(health[0]["tensors"][0], "model.layers.0.self_attn.q_proj/inputs");
    // The scale recorded is the one the step's cast used: with te lag, fp8_max / the history's max
    // as it was before the step's own amax went in.
    if (recipe.mode == ScalingMode::Delayed && recipe.lag == ScalingLag::Te) {
      for (const nlohmann::json& e : health) {
        for (size_t i = 0; i < e["tensors"].size(); ++i) {
          const float fp8_max = e["format"][i] == "e4m3" ? 448.0f : 57344.0f;
          EXPECT_EQ(e["scale"][i].get<float>(), fp8_max / e["history_amax"][i].get<float>()) << e["tensors"][i];
        }
      }
    }
  }
}

// Per-Linear recipes: delayed and current slots in one table, each named with its mode, and recording
// still leaves training as it is.
TEST(LmHealth, MixedDelayedAndCurrentLinearsRecordTheirModes) {
  const auto train = stream(2000, 5), validation = stream(400, 6);
  testing::TempDir plain("lm_health_mixed_off"), recorded("lm_health_mixed_on");
  MetricsLog plain_log(plain / "metrics.jsonl", false), recorded_log(recorded / "metrics.jsonl", false);
  LmTrainOptions off = lm_options(plain.path(), recipes()[1], 0), on = lm_options(recorded.path(), recipes()[1], 2);
  off.linears = on.linears = nn::LinearRecipes::parse(std::vector<std::string>{"*.mlp.*=current", "*.o_proj=block"});
  off.metrics = &plain_log;
  on.metrics = &recorded_log;
  LmTrainResult a = train_lm(off, train, validation);
  LmTrainResult b = train_lm(on, train, validation);
  EXPECT_EQ(values(a.model.parameter_set().values()), values(b.model.parameter_set().values()));
  const auto health = events(recorded / "metrics.jsonl", "health");
  ASSERT_EQ(health.size(), 3u);
  const ops::ScalingTable& table = *b.model.scaling();
  EXPECT_EQ(table.size(), 3 * 6 * b.model.config().num_hidden_layers);  // o_proj keeps no slots
  for (const nlohmann::json& e : health) {
    expect_complete(e, table);
    for (int i = 0; i < table.size(); ++i)
      EXPECT_EQ(e["mode"][i], table.name(i).find(".mlp.") != std::string::npos ? "current" : "delayed") << table.name(i);
  }
}

// A run shorter than --health-every records its last step (else its report would have nothing), and
// a longer one its last step beside every N-th.
TEST(LmHealth, TheLastStepRecordsToo) {
  const auto train = stream(2000, 7), validation = stream(400, 8);
  for (const int64_t every : {50, 4}) {
    testing::TempDir dir("lm_health_last");
    MetricsLog log(dir / "metrics.jsonl", false);
    LmTrainOptions o = lm_options(dir.path(), recipes()[0], every);
    o.metrics = &log;
    train_lm(o, train, validation);
    const auto health = events(dir / "metrics.jsonl", "health");
    std::vector<int64_t> steps;
    for (const nlohmann::json& e : health) steps.push_back(e["step"].get<int64_t>());
    const std::vector<int64_t> want = every == 50 ? std::vector<int64_t>{6} : std::vector<int64_t>{4, 6};
    EXPECT_EQ(steps, want) << "every " << every;
  }
}

TEST(LmHealth, NothingRecordedWithoutPerTensorScales) {
  const auto train = stream(2000, 3), validation = stream(400, 4);
  testing::TempDir dir("lm_health_block");
  MetricsLog log(dir / "metrics.jsonl", false);
  Fp8Recipe block;
  block.mode = ScalingMode::Block;
  LmTrainOptions o = lm_options(dir.path(), block, 1);
  o.steps = 2;
  o.metrics = &log;
  train_lm(o, train, validation);
  EXPECT_TRUE(events(dir / "metrics.jsonl", "health").empty());
  EXPECT_EQ(events(dir / "metrics.jsonl", "step").size(), 2u);
}

// --- the seed classifier's trainer

constexpr int kVocab = 50, kLength = 8;

TokenDataset synthetic(int examples, uint32_t seed) {
  std::mt19937 rng(seed);
  TokenDataset data;
  data.sequence_length = kLength;
  for (int e = 0; e < examples; ++e) {
    int upper = 0;
    for (int t = 0; t < kLength; ++t) {
      const int32_t token = 1 + static_cast<int32_t>(rng() % (kVocab - 1));
      upper += token >= kVocab / 2;
      data.tokens.push_back(token);
    }
    data.labels.push_back(2 * upper > kLength ? 1.0f : 0.0f);
  }
  return data;
}

TrainOptions seed_options(const Fp8Recipe& recipe, int64_t health_every, MetricsLog* log) {
  TrainOptions o;
  o.model = {.vocabulary_size = kVocab, .sequence_length = kLength, .hidden_dim = 8, .num_heads = 2,
             .intermediate_dim = 8, .dropout = 0.1f};
  o.precision = nn::Precision::Fp8;
  o.recipe = recipe;
  o.epochs = 2;
  o.batch_size = 8;  // 6 steps per epoch
  o.seed = 7;
  o.console = nullptr;
  o.metrics = log;
  o.health_every = health_every;
  return o;
}

TEST(SeedHealth, RecordingLeavesTrainingExactlyAsItIs) {
  const TokenDataset train_data = synthetic(44, 1), validation = synthetic(16, 2);
  for (const Fp8Recipe& recipe : recipes()) {
    SCOPED_TRACE(describe(recipe));
    testing::TempDir dir("seed_health");
    MetricsLog plain(dir / "off.jsonl", false), recorded(dir / "on.jsonl", false);
    TrainResult a = train(seed_options(recipe, 0, &plain), train_data, &validation, nullptr);
    TrainResult b = train(seed_options(recipe, 4, &recorded), train_data, &validation, nullptr);
    ASSERT_EQ(a.epochs.size(), b.epochs.size());
    for (size_t e = 0; e < a.epochs.size(); ++e) {
      EXPECT_EQ(a.epochs[e].loss, b.epochs[e].loss) << e;
      EXPECT_EQ(a.epochs[e].accuracy, b.epochs[e].accuracy) << e;
      EXPECT_EQ(a.epochs[e].validation->loss, b.epochs[e].validation->loss) << e;
    }
    EXPECT_EQ(values(a.model.parameter_set().values()), values(b.model.parameter_set().values()));

    // Steps 4, 8 and 12 of 12, each written before its epoch's line.
    const auto health = events(dir / "on.jsonl", "health");
    ASSERT_EQ(health.size(), 3u);
    const int64_t epochs[] = {1, 2, 2};
    for (size_t i = 0; i < health.size(); ++i) {
      EXPECT_EQ(health[i]["step"], 4 * (i + 1));
      EXPECT_EQ(health[i]["epoch"], epochs[i]);
      expect_complete(health[i], *b.model.scaling());
    }
    std::ifstream in(dir / "on.jsonl");
    std::vector<std::string> kinds;
    for (std::string line; std::getline(in, line);) kinds.push_back(nlohmann::json::parse(line)["event"]);
    EXPECT_EQ(kinds, (std::vector<std::string>{"health", "epoch", "health", "health", "epoch"}));
  }
}

TEST(SeedHealth, ResumeForgetsTheHealthOfEpochsItTrainsAgain) {
  testing::TempDir dir("seed_health_resume");
  {
    MetricsLog log(dir / "metrics.jsonl", false);
    log.write({{"event", "health"}, {"precision", "fp8"}, {"epoch", 1}, {"step", 4}});
    log.write({{"event", "epoch"}, {"precision", "fp8"}, {"epoch", 1}});
    log.write({{"event", "health"}, {"precision", "fp8"}, {"epoch", 2}, {"step", 8}});
    log.forget_epochs_after("fp8", 1);
  }
  const auto health = events(dir / "metrics.jsonl", "health");
  ASSERT_EQ(health.size(), 1u);
  EXPECT_EQ(health[0]["step"], 4);
}

}  // namespace
}  // namespace fp8kit::train
