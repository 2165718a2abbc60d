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

namespace fp8kit::io {
namespace {

using ::testing::HasSubstr;

struct CheckpointTest : ::testing::Test {
  const testing::TempDir dir{"checkpoint"};
  std::vector<float> weight{1.0f, -0.0f, std::numeric_limits<float>::denorm_min(), 3.5f, -1e30f, 7.0f};
  std::vector<float> scale{0.125f};
  std::vector<float> history{4.0f, 0.0f, 2.0f, 1.0f};

  std::vector<nn::StateEntry> entries() {
    return {{"dense/kernel", {2, 3}, weight}, {"dense/inputs_scale", {}, scale},
            {"dense/inputs_amax_history", {4}, history}};
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

}  // namespace
}  // namespace fp8kit::io
