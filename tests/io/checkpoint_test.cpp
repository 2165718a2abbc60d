// Training checkpoints: a save/load round trip restores every value bit for bit; mismatched
// metadata, missing, extra and mis-shaped tensors are refused with the reason, restoring nothing.
#include "io/checkpoint.h"

#include "base/error.h"
#include "common/temp_dir.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include <sys/stat.h>

namespace fp8kit::io {
namespace {

using ::testing::HasSubstr;

struct CheckpointTest : ::testing::Test {
  const testing::TempDir dir{"checkpoint"};
  std::vector<float> weight{1.0f, -0.0f, std::numeric_limits<float>::denorm_min(), 3.5f, -1e30f, 7.0f};
  std::vector<float> scale{0.125f};
  std::vector<float> history{4.0f, 0.0f, 2.0f, 1.0f};

  std::vector<float> iterations{12.0f};

  std::vector<nn::StateEntry> entries() {
    return {{"dense/kernel", {2, 3}, weight}, {"dense/inputs_scale", {}, scale},
            {"dense/inputs_amax_history", {4}, history}};
  }
  // With the domains the model and optimizer give their state.
  std::vector<nn::StateEntry> typed_entries() {
    return {{"dense/kernel", {2, 3}, weight},
            {"dense/inputs_scale", {}, scale, nn::Domain::Positive},
            {"dense/inputs_amax_history", {4}, history, nn::Domain::NonNegative},
            {"optimizer/iterations", {}, iterations, nn::Domain::Count}};
  }
  std::string load_error(std::span<const nn::StateEntry> into, std::span<const MetadataRequirement> requirements) {
    try {
      load_checkpoint(dir / "ckpt.safetensors", into, requirements);
    } catch (const Error& e) {
      return e.what();
    }
    return "(loaded)";
  }
};

TEST_F(CheckpointTest, RoundTripRestoresEveryValueExactly) {
  save_checkpoint(dir / "ckpt.safetensors", entries(), {{"precision", "fp8"}, {"step", "12"}});
  std::vector<float> weight2(6), scale2(1), history2(4);
  const std::vector<nn::StateEntry> into{{"dense/kernel", {2, 3}, weight2},
                                         {"dense/inputs_scale", {}, scale2},
                                         {"dense/inputs_amax_history", {4}, history2}};
  const std::vector<MetadataRequirement> requirements{{"precision", "fp8", "--precision"}};
  const Metadata metadata = load_checkpoint(dir / "ckpt.safetensors", into, requirements);
  EXPECT_EQ(metadata.at("step"), "12");
  EXPECT_EQ(metadata.at("format"), kTrainingCheckpointFormat);
  EXPECT_EQ(std::memcmp(weight2.data(), weight.data(), 6 * sizeof(float)), 0);
  EXPECT_TRUE(std::signbit(weight2[1]));
  EXPECT_EQ(scale2, scale);
  EXPECT_EQ(history2, history);
}

TEST_F(CheckpointTest, RefusesAnotherPrecisionWithTheReason) {
  save_checkpoint(dir / "ckpt.safetensors", entries(), {{"precision", "fp8"}});
  const std::vector<MetadataRequirement> requirements{{"precision", "bf16", "--precision"}};
  EXPECT_THAT(load_error(entries(), requirements),
              HasSubstr("was trained with precision fp8 but --precision bf16 was given"));
  const std::vector<MetadataRequirement> unrecorded{{"seed", "1", "--seed"}};
  EXPECT_THAT(load_error(entries(), unrecorded), HasSubstr("does not record its seed"));
}

TEST_F(CheckpointTest, RefusesMissingExtraAndMisshapedTensorsAndRestoresNothing) {
  save_checkpoint(dir / "ckpt.safetensors", entries(), {});
  std::vector<float> a(6, 9.0f), b(1, 9.0f), c(4, 9.0f), d(2, 9.0f);
  const std::vector<nn::StateEntry> missing{{"dense/kernel", {2, 3}, a}, {"dense/inputs_scale", {}, b},
                                            {"dense/inputs_amax_history", {4}, c}, {"dense/bias", {2}, d}};
  EXPECT_THAT(load_error(missing, {}), HasSubstr("has no tensor \"dense/bias\""));
  const std::vector<nn::StateEntry> extra{{"dense/kernel", {2, 3}, a}, {"dense/inputs_scale", {}, b}};
  EXPECT_THAT(load_error(extra, {}), HasSubstr("tensor \"dense/inputs_amax_history\" that this model does not have"));
  const std::vector<nn::StateEntry> misshaped{{"dense/kernel", {3, 2}, a}, {"dense/inputs_scale", {}, b},
                                              {"dense/inputs_amax_history", {4}, c}};
  EXPECT_THAT(load_error(misshaped, {}), HasSubstr("\"dense/kernel\" has shape [2, 3] but the model needs [3, 2]"));
  EXPECT_EQ(a, std::vector<float>(6, 9.0f));
}

TEST_F(CheckpointTest, RefusesAPlainSafetensorsFile) {
  write_safetensors(dir / "ckpt.safetensors", SafetensorsFile{});
  EXPECT_THAT(load_error({}, {}), HasSubstr("not an fp8kit training checkpoint"));
}

// A corrupt or hand-edited checkpoint must not restore values the model could never have saved:
// the error names the file, the tensor, the first bad index and its value, and nothing is restored.
TEST_F(CheckpointTest, RefusesValuesOutsideTheirDomainAndRestoresNothing) {
  const auto path = dir / "ckpt.safetensors";
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  struct Case {
    std::string tensor;
    size_t index;
    float value;
    std::string expected;
  };
  const std::vector<Case> cases{
      {"dense/kernel", 2, nan, "tensor \"dense/kernel\" holds nan at index 2, but must be finite"},
      {"dense/kernel", 5, -inf, "tensor \"dense/kernel\" holds -inf at index 5, but must be finite"},
      {"dense/inputs_scale", 0, 0.0f,
       "tensor \"dense/inputs_scale\" holds 0 at index 0, but must be finite and positive"},
      {"dense/inputs_scale", 0, inf, "tensor \"dense/inputs_scale\" holds inf at index 0"},
      {"dense/inputs_amax_history", 1, -2.0f,
       "tensor \"dense/inputs_amax_history\" holds -2 at index 1, but must be finite and non-negative"},
      {"dense/inputs_amax_history", 3, nan, "tensor \"dense/inputs_amax_history\" holds nan at index 3"},
      {"optimizer/iterations", 0, 16.5f,
       "tensor \"optimizer/iterations\" holds 16.5 at index 0, but must be a whole number"},
      {"optimizer/iterations", 0, -1.0f, "tensor \"optimizer/iterations\" holds -1 at index 0"},
      {"optimizer/iterations", 0, nan, "tensor \"optimizer/iterations\" holds nan at index 0"},
      {"optimizer/iterations", 0, 33554432.0f, "tensor \"optimizer/iterations\" holds 33554432 at index 0"},
  };
  for (const Case& c : cases) {
    SafetensorsFile file;
    file.metadata = {{"format", std::string(kTrainingCheckpointFormat)}};
    for (const nn::StateEntry& e : typed_entries()) {
      std::vector<float> values(e.data.begin(), e.data.end());
      if (e.name == c.tensor) values[c.index] = c.value;
      file.tensors.push_back(f32_tensor(e.name, e.shape, values));
    }
    write_safetensors(path, file);
    std::vector<float> w(6, 9.0f), sc(1, 9.0f), h(4, 9.0f), it(1, 9.0f);
    const std::vector<nn::StateEntry> into{{"dense/kernel", {2, 3}, w},
                                           {"dense/inputs_scale", {}, sc, nn::Domain::Positive},
                                           {"dense/inputs_amax_history", {4}, h, nn::Domain::NonNegative},
                                           {"optimizer/iterations", {}, it, nn::Domain::Count}};
    EXPECT_THAT(load_error(into, {}), HasSubstr("checkpoint " + path.string() + ": " + c.expected)) << c.expected;
    EXPECT_EQ(w, std::vector<float>(6, 9.0f));
    EXPECT_EQ(it, std::vector<float>(1, 9.0f));
  }
}

// What load refuses is never written: a save of state outside its domain fails and leaves the file.
TEST_F(CheckpointTest, SaveRefusesValuesOutsideTheirDomain) {
  const auto path = dir / "ckpt.safetensors";
  save_checkpoint(path, typed_entries(), {{"epoch", "1"}});
  history[2] = std::numeric_limits<float>::quiet_NaN();
  try {
    save_checkpoint(path, typed_entries(), {{"epoch", "2"}});
    ADD_FAILURE() << "saved";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), HasSubstr("not saving checkpoint " + path.string() +
                                    ": tensor \"dense/inputs_amax_history\" holds nan at index 2"));
  }
  EXPECT_EQ(read_safetensors(path).metadata.at("epoch"), "1");
}

// A FIFO in place of the checkpoint is refused at once instead of blocking the resume forever.
TEST_F(CheckpointTest, RefusesAFifoWithoutWaitingForAWriter) {
  ASSERT_EQ(::mkfifo((dir / "ckpt.safetensors").c_str(), 0600), 0);
  EXPECT_THAT(load_error(entries(), {}), HasSubstr((dir / "ckpt.safetensors").string() + " is a FIFO"));
}

}  // namespace
}  // namespace fp8kit::io
