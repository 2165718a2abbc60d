// The training loop on a tiny synthetic task (vocabulary 50, sequences of 8): resuming reproduces an
// uninterrupted run bit for bit, a NaN stops training and leaves the last good checkpoint intact,
// and checkpoints of another precision or model are refused with the reason.
#include "train/trainer.h"

#include "base/error.h"
#include "common/temp_dir.h"
#include "io/checkpoint.h"
#include "io/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <random>

namespace fp8kit::train {
namespace {

using ::testing::HasSubstr;

constexpr int kVocab = 50, kLength = 8;

// Label 1 when the sequence holds more ids from the upper half of the vocabulary than the lower.
TokenDataset synthetic(int examples, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> id(1, kVocab - 1);
  TokenDataset data;
  data.sequence_length = kLength;
  for (int e = 0; e < examples; ++e) {
    int upper = 0;
    for (int t = 0; t < kLength; ++t) {
      const int32_t token = id(rng);
      upper += token >= kVocab / 2;
      data.tokens.push_back(token);
    }
    data.labels.push_back(2 * upper > kLength ? 1.0f : 0.0f);
  }
  return data;
}

struct TrainerTest : ::testing::Test {
  const testing::TempDir dir{"trainer"};
  TokenDataset train_data = synthetic(44, 1), validation = synthetic(16, 2), test = synthetic(24, 3);

  TrainOptions options(nn::Precision precision, int epochs, const std::string& sub) const {
    TrainOptions o;
    o.model = {.vocabulary_size = kVocab, .sequence_length = kLength, .hidden_dim = 8, .num_heads = 2,
               .intermediate_dim = 8, .dropout = 0.1f};
    o.precision = precision;
    o.recipe.amax_history_length = 4;
    o.epochs = epochs;
    o.batch_size = 8;  // 6 steps per epoch, the last one of 4 examples
    o.seed = 1234;
    o.out = dir / sub;
    o.console = nullptr;
    return o;
  }
  std::string train_error(const TrainOptions& o) {
    try {
      train(o, train_data, &validation, nullptr);
    } catch (const Error& e) {
      return e.what();
    }
    return "(trained)";
  }
};

void expect_same_tensors(const std::filesystem::path& a, const std::filesystem::path& b) {
  const io::SafetensorsFile fa = io::read_safetensors(a), fb = io::read_safetensors(b);
  ASSERT_EQ(fa.tensors.size(), fb.tensors.size());
  for (const io::StoredTensor& tensor : fa.tensors) {
    const io::StoredTensor* other = fb.find(tensor.name);
    ASSERT_NE(other, nullptr) << tensor.name;
    EXPECT_EQ(tensor.shape, other->shape) << tensor.name;
    EXPECT_TRUE(tensor.data == other->data) << tensor.name << " differs";
  }
  EXPECT_EQ(fa.metadata, fb.metadata);
}

class ResumeTest : public TrainerTest, public ::testing::WithParamInterface<nn::Precision> {};

TEST_P(ResumeTest, ResumingGivesTheSameWeightsAsAnUninterruptedRun) {
  const nn::Precision precision = GetParam();
  const TrainResult straight = train(options(precision, 2, "straight"), train_data, &validation, &test);

  TrainOptions first = options(precision, 1, "resumed");
  train(first, train_data, &validation, nullptr);
  TrainOptions second = options(precision, 2, "resumed");
  second.resume = true;
  TrainResult resumed = train(second, train_data, &validation, &test);
  ASSERT_EQ(resumed.epochs.size(), 1u);
  EXPECT_EQ(resumed.epochs[0].epoch, 2);

  const auto name = checkpoint_path({}, precision).filename();
  expect_same_tensors(dir / "straight" / name, dir / "resumed" / name);
  EXPECT_EQ(straight.test->loss, resumed.test->loss);
  EXPECT_EQ(straight.epochs[1].loss, resumed.epochs[0].loss);
  if (precision == nn::Precision::Fp8) {
    // The FP8 scaling state is part of the checkpoint.
    const io::SafetensorsFile file = io::read_safetensors(dir / "resumed" / name);
    int fp8_tensors = 0;
    for (const auto& tensor : file.tensors) fp8_tensors += tensor.name.find("amax_history") != std::string::npos;
    EXPECT_EQ(fp8_tensors, 8 * 3);
  }
}

INSTANTIATE_TEST_SUITE_P(Precisions, ResumeTest,
                         ::testing::Values(nn::Precision::Fp32, nn::Precision::Bf16, nn::Precision::Fp8),
                         [](const auto& info) { return std::string(nn::name(info.param)); });

TEST_F(TrainerTest, NanLossStopsWithTheStepAndKeepsTheLastGoodCheckpoint) {
  train(options(nn::Precision::Bf16, 1, "clean"), train_data, &validation, nullptr);

  TrainOptions o = options(nn::Precision::Bf16, 3, "nan");
  o.before_step = [](models::SeedClassifier& model, int64_t step) {
    if (step == 8) {  // epoch 2, step 3
      for (nn::Parameter* p : model.parameters()) std::ranges::fill(p->value.span<float>(), NAN);
    }
  };
  const std::string checkpoint = checkpoint_path(o.out, o.precision).string();
  EXPECT_THAT(train_error(o), HasSubstr("loss became NaN at epoch 2 step 3 (bf16 precision); last good checkpoint: " +
                                        checkpoint));
  // The checkpoint of epoch 1 is intact: identical to a clean one-epoch run's.
  expect_same_tensors(checkpoint, checkpoint_path(dir / "clean", o.precision));

  TrainOptions early = options(nn::Precision::Bf16, 1, "early");
  early.before_step = [](models::SeedClassifier& model, int64_t step) {
    if (step == 2) std::ranges::fill(model.parameters()[0]->value.span<float>(), NAN);
  };
  EXPECT_THAT(train_error(early), HasSubstr("at epoch 1 step 3 (bf16 precision); no checkpoint was written yet"));
  EXPECT_FALSE(std::filesystem::exists(checkpoint_path(early.out, early.precision)));
}

TEST_F(TrainerTest, RefusesACheckpointOfAnotherPrecisionOrModel) {
  train(options(nn::Precision::Fp8, 1, "run"), train_data, &validation, nullptr);
  const auto fp8 = checkpoint_path(dir / "run", nn::Precision::Fp8);
  std::filesystem::copy_file(fp8, checkpoint_path(dir / "run", nn::Precision::Bf16));

  TrainOptions bf16 = options(nn::Precision::Bf16, 2, "run");
  bf16.resume = true;
  EXPECT_THAT(train_error(bf16), HasSubstr("was trained with precision fp8 but --precision bf16 was given"));

  TrainOptions wider = options(nn::Precision::Fp8, 2, "run");
  wider.resume = true;
  wider.model.hidden_dim = 16;
  EXPECT_THAT(train_error(wider), HasSubstr("was trained with model_config"));

  TrainOptions fewer_epochs = options(nn::Precision::Fp8, 0, "run");
  fewer_epochs.resume = true;
  EXPECT_THAT(train_error(fewer_epochs), HasSubstr("was saved after epoch 1, beyond --epochs 0"));

  TrainOptions other_seed = options(nn::Precision::Fp8, 2, "run");
  other_seed.resume = true;
  other_seed.seed = 7;
  EXPECT_THAT(train_error(other_seed), HasSubstr("seed 1234 but --seed 7 was given"));

  // As many examples, other token ids (another --vocab or --data): the model would read other words.
  TrainOptions other_data = options(nn::Precision::Fp8, 2, "run");
  other_data.resume = true;
  const TokenDataset other = synthetic(static_cast<int>(train_data.size()), 99);
  try {
    train(other_data, other, &validation, nullptr);
    ADD_FAILURE() << "resumed on other training data";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("was trained with train_data fnv1a64:"));
    EXPECT_THAT(e.what(), HasSubstr("but the training data (the tokens of --data, --vocab and --limit) fnv1a64:"));
  }

}

TEST_F(TrainerTest, ResumingWithoutACheckpointStartsFromTheBeginning) {
  const TrainResult fresh = train(options(nn::Precision::Fp32, 1, "fresh"), train_data, &validation, nullptr);
  TrainOptions o = options(nn::Precision::Fp32, 1, "resumed");
  o.resume = true;
  const TrainResult resumed = train(o, train_data, &validation, nullptr);
  ASSERT_EQ(resumed.epochs.size(), 1u);
  EXPECT_EQ(resumed.epochs[0].loss, fresh.epochs[0].loss);
}

// Rewrites the checkpoint at `path` through `edit` (no validation: as a corrupt or hand-edited file).
void edit_checkpoint(const std::filesystem::path& path, const std::function<void(io::SafetensorsFile&)>& edit) {
  io::SafetensorsFile file = io::read_safetensors(path);
  edit(file);
  io::write_safetensors(path, file);
}

void set_value(io::SafetensorsFile& file, const std::string& name, size_t index, float value) {
  io::StoredTensor& tensor = const_cast<io::StoredTensor&>(*file.find(name));
  std::memcpy(tensor.data.data() + index * sizeof(float), &value, sizeof(float));
}

TEST_F(TrainerTest, ResumeRefusesImpossibleCheckpointValuesAndEpochs) {
  const TrainOptions first = options(nn::Precision::Fp8, 1, "run");
  train(first, train_data, &validation, nullptr);
  const auto path = checkpoint_path(first.out, first.precision);
  const auto pristine = dir / "pristine.safetensors";
  std::filesystem::copy_file(path, pristine);
  TrainOptions o = options(nn::Precision::Fp8, 2, "run");
  o.resume = true;
  const std::string prefix = "checkpoint " + path.string() + ": tensor ";

  auto corrupt = [&](const std::function<void(io::SafetensorsFile&)>& edit) {
    std::filesystem::copy_file(pristine, path, std::filesystem::copy_options::overwrite_existing);
    edit_checkpoint(path, edit);
    return train_error(o);
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::string kernel = "transformer_decoder/self_attention/query/kernel";
  EXPECT_THAT(corrupt([&](auto& f) { set_value(f, kernel, 3, nan); }),
              HasSubstr(prefix + "\"" + kernel + "\" holds nan at index 3, but must be finite"));
  EXPECT_THAT(corrupt([&](auto& f) { set_value(f, "optimizer/iterations", 0, 16.5f); }),
              HasSubstr(prefix + "\"optimizer/iterations\" holds 16.5 at index 0"));
  // Once reported as -9223372036854775808 steps.
  EXPECT_THAT(corrupt([&](auto& f) { set_value(f, "optimizer/iterations", 0, nan); }),
              HasSubstr(prefix + "\"optimizer/iterations\" holds nan at index 0"));
  EXPECT_THAT(corrupt([&](auto& f) { set_value(f, "optimizer/" + kernel + "/v", 0, -1.0f); }),
              HasSubstr("holds -1 at index 0, but must be finite and non-negative"));
  const std::string history = "transformer_decoder/self_attention/query/inputs_amax_history";
  EXPECT_THAT(corrupt([&](auto& f) { set_value(f, history, 1, nan); }),
              HasSubstr(prefix + "\"" + history + "\" holds nan at index 1"));
  const std::string scale = "transformer_decoder/self_attention/query/inputs_scale";
  EXPECT_THAT(corrupt([&](auto& f) { set_value(f, scale, 0, -4.0f); }),
              HasSubstr("inputs_scale\" holds -4 at index 0, but must be finite and positive"));
  // An epoch that does not parse was once read as 0.
  for (const std::string epoch : {"", "abc", "1.5", "-1", " 1", "99999999999"}) {
    EXPECT_THAT(corrupt([&](auto& f) { f.metadata["epoch"] = epoch; }),
                HasSubstr("checkpoint " + path.string() + " records epoch \"" + epoch + "\", which is not a whole "
                          "number of epochs"))
        << epoch;
  }
  // The pristine file still resumes.
  std::filesystem::copy_file(pristine, path, std::filesystem::copy_options::overwrite_existing);
  EXPECT_EQ(train_error(o), "(trained)");
}

std::vector<nlohmann::json> read_events(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::vector<nlohmann::json> events;
  for (std::string line; std::getline(in, line);) events.push_back(nlohmann::json::parse(line));
  return events;
}

std::vector<int> epoch_lines(const std::filesystem::path& path) {
  std::vector<int> epochs;
  for (const auto& event : read_events(path)) {
    if (event["event"] == "epoch") epochs.push_back(event["epoch"]);
  }
  return epochs;
}

// A kill during the first checkpoint write leaves its temporary file (and maybe the epoch's line):
// resuming starts from the beginning, removes the leftover and keeps one line per epoch. Files not
// of our naming are left alone.
TEST_F(TrainerTest, ResumeAfterAKillDuringTheFirstCheckpointStartsOverAndCleansUp) {
  TrainOptions o = options(nn::Precision::Fp32, 1, "killed");
  std::filesystem::create_directories(o.out);
  const auto leftover = o.out / ".checkpoint-fp32.safetensors.tmp-a1B2c3";
  std::ofstream(leftover) << std::string(1 << 20, 'x');  // the partial write
  const std::vector<std::filesystem::path> others{o.out / ".checkpoint-fp32.safetensors.tmp-a1B2c34",
                                                  o.out / ".checkpoint-fp32.safetensors.tmp-a1B2",
                                                  o.out / "checkpoint-fp32.safetensors.tmp-a1B2c3",
                                                  o.out / ".checkpoint-fp32.safetensors.tmp-a1.2c3", o.out / "notes"};
  for (const auto& other : others) std::ofstream(other) << "keep";
  const auto log_path = o.out / "metrics.jsonl";
  std::ofstream(log_path) << R"({"event":"run"})" "\n"
                          << R"({"event":"epoch","precision":"fp32","epoch":1,"step":6})" "\n"
                          << R"({"event":"epo)";  // a line cut short
  {
    MetricsLog log(log_path, true);
    o.metrics = &log;
    o.resume = true;
    const TrainResult resumed = train(o, train_data, &validation, nullptr);
    ASSERT_EQ(resumed.epochs.size(), 1u);
    EXPECT_EQ(resumed.epochs[0].epoch, 1);
  }
  EXPECT_FALSE(std::filesystem::exists(leftover));
  for (const auto& other : others) EXPECT_TRUE(std::filesystem::exists(other)) << other;
  EXPECT_EQ(epoch_lines(log_path), std::vector<int>{1});
  EXPECT_EQ(read_events(log_path).size(), 2u);
  expect_same_tensors(checkpoint_path(o.out, o.precision),
                      *train(options(nn::Precision::Fp32, 1, "fresh"), train_data, &validation, nullptr).checkpoint);
}

// The epoch's metrics line is on disk before its checkpoint is renamed into place: when the rename
// fails (as a kill just before it would leave things), the line is there and the old checkpoint too.
TEST_F(TrainerTest, WritesTheEpochsMetricsLineBeforeItsCheckpoint) {
  TrainOptions o = options(nn::Precision::Bf16, 1, "order");
  std::filesystem::create_directories(checkpoint_path(o.out, o.precision) / "in_the_way");
  MetricsLog log(o.out / "metrics.jsonl", false);
  o.metrics = &log;
  EXPECT_THAT(train_error(o), HasSubstr("cannot replace"));
  EXPECT_EQ(epoch_lines(log.path()), std::vector<int>{1});
}

// A kill after the epoch-2 line but before its checkpoint landed: the resumed run forgets that line
// and logs epoch 2 once, with what an uninterrupted run logs. Other precisions' lines stay.
TEST_F(TrainerTest, ResumeForgetsTheLinesOfEpochsWhoseCheckpointNeverLanded) {
  const auto straight_log = dir / "straight" / "metrics.jsonl";
  {
    MetricsLog log(straight_log, false);
    TrainOptions straight = options(nn::Precision::Fp32, 2, "straight");
    straight.metrics = &log;
    train(straight, train_data, &validation, nullptr);
  }
  const auto log_path = dir / "killed" / "metrics.jsonl";
  {
    MetricsLog log(log_path, false);
    TrainOptions first = options(nn::Precision::Fp32, 1, "killed");
    first.metrics = &log;
    train(first, train_data, &validation, nullptr);
    log.write({{"event", "epoch"}, {"precision", "bf16"}, {"epoch", 2}});
    // Its checkpoint never landed.
    log.write({{"event", "epoch"}, {"precision", "fp32"}, {"epoch", 2}, {"loss", 123.0}});
  }
  {
    MetricsLog log(log_path, true);
    TrainOptions second = options(nn::Precision::Fp32, 2, "killed");
    second.metrics = &log;
    second.resume = true;
    train(second, train_data, &validation, nullptr);
  }
  const auto events = read_events(log_path), expected = read_events(straight_log);
  ASSERT_EQ(events.size(), 3u);
  EXPECT_EQ(events[1]["precision"], "bf16");
  for (const auto& [got, want] : {std::pair{events[0], expected[0]}, std::pair{events[2], expected[1]}}) {
    EXPECT_EQ(got["epoch"], want["epoch"]);
    EXPECT_EQ(got["loss"], want["loss"]);
    EXPECT_EQ(got["val_loss"], want["val_loss"]);
  }
}

TEST_F(TrainerTest, LogsEpochsAndTestAndLearnsTheTask) {
  TrainOptions o = options(nn::Precision::Fp32, 6, "log");
  o.adam.learning_rate = 1e-2f;
  MetricsLog log(dir / "log" / "metrics.jsonl", false);
  o.metrics = &log;
  const TrainResult result = train(o, train_data, &validation, &test);
  ASSERT_EQ(result.epochs.size(), 6u);
  EXPECT_LT(result.epochs.back().loss, result.epochs.front().loss);
  ASSERT_TRUE(result.test.has_value());

  std::ifstream in(log.path());
  std::vector<nlohmann::json> events;
  for (std::string line; std::getline(in, line);) events.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(events.size(), 7u);
  EXPECT_EQ(events[0]["event"], "epoch");
  EXPECT_EQ(events[0]["step"], 6);
  EXPECT_TRUE(events[0].contains("val_accuracy"));
  EXPECT_EQ(events[6]["event"], "test");
  EXPECT_EQ(events[6]["accuracy"], result.test->accuracy);
}

TEST_F(TrainerTest, EvaluateMatchesALossComputedByHand) {
  models::SeedClassifier model(options(nn::Precision::Fp32, 1, "").model, 5);
  model.set_precision(nn::Precision::Fp32);
  const Evaluation e = evaluate(model, test, 5);  // 24 examples: batches of 5 and a last of 4
  double loss = 0;
  int correct = 0;
  for (int64_t i = 0; i < test.size(); ++i) {
    const auto p = model.forward(std::span(test.tokens).subspan(i * kLength, kLength), 1, false, 0)[0];
    const double clipped = std::clamp(static_cast<double>(p), 1e-7, 1 - 1e-7);
    loss -= test.labels[i] ? std::log(clipped) : std::log(1 - clipped);
    correct += (p > 0.5f) == (test.labels[i] > 0.5f);
  }
  EXPECT_NEAR(e.loss, loss / test.size(), 1e-6);
  EXPECT_DOUBLE_EQ(e.accuracy, correct / static_cast<double>(test.size()));
}

TEST_F(TrainerTest, RejectsDataThatDoesNotFitTheModel) {
  TokenDataset bad = train_data;
  bad.tokens[3] = kVocab;
  EXPECT_THAT([&] { train(options(nn::Precision::Fp32, 1, "bad"), bad, nullptr, nullptr); },
              ::testing::ThrowsMessage<Error>(HasSubstr("but the vocabulary has 50 ids")));
  TokenDataset empty;
  empty.sequence_length = kLength;
  EXPECT_THAT([&] { train(options(nn::Precision::Fp32, 1, "bad"), empty, nullptr, nullptr); },
              ::testing::ThrowsMessage<Error>(HasSubstr("the training set is empty")));
}

}  // namespace
}  // namespace fp8kit::train
