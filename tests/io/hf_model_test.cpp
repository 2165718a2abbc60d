// HF model directories: single-file and sharded round trips, the index exactly as transformers writes
// it, removal of an earlier save's files, every malformed directory the reader must refuse, and the
// bf16 <-> f32 conversions.
#include "io/hf_model.h"

#include "common/error_of.h"
#include "common/read_text.h"
#include "common/temp_dir.h"
#include "numerics/cast.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>

namespace fp8kit::io {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::error_of;
using testing::read_text;

// Owns the bytes behind a list of TensorViews.
struct Weights {
  std::vector<std::vector<float>> values;
  std::vector<TensorView> views;

  // An F32 tensor of `count` distinct values.
  void add(std::string name, std::vector<int64_t> shape, float base) {
    int64_t count = 1;
    for (int64_t dim : shape) count *= dim;
    auto& data = values.emplace_back();
    for (int64_t i = 0; i < count; ++i) data.push_back(base + 0.25f * static_cast<float>(i));
    views.push_back({std::move(name), Dtype::F32, std::move(shape), std::as_bytes(std::span(data))});
  }
};

std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

void expect_same_tensors(const HfWeights& loaded, const Weights& saved) {
  ASSERT_EQ(loaded.size(), saved.views.size());
  for (const TensorView& tensor : saved.views) {
    const TensorView& read = loaded.at(tensor.name);
    EXPECT_EQ(read.dtype, tensor.dtype) << tensor.name;
    EXPECT_EQ(read.shape, tensor.shape) << tensor.name;
    EXPECT_TRUE(std::ranges::equal(read.data, tensor.data)) << tensor.name;
  }
}

TEST(HfModel, SmallModelsAreOneFileWithoutIndex) {
  const testing::TempDir dir("hf_model");
  Weights weights;
  weights.add("model.embed_tokens.weight", {4, 3}, 1.0f);
  weights.add("model.norm.weight", {3}, -2.0f);
  const std::vector<float> master{1.0f, 1.00390625f, -3.14159f, 65504.5f};
  const std::vector<uint16_t> bits = f32_to_bf16(master);
  weights.views.push_back({"lm_head.weight", Dtype::BF16, {2, 2}, std::as_bytes(std::span(bits))});

  EXPECT_THAT(write_hf_model_weights(dir.path(), weights.views), ElementsAre("model.safetensors"));
  EXPECT_THAT(files_in(dir.path()), ElementsAre("model.safetensors"));
  EXPECT_EQ(read_safetensors(dir / "model.safetensors").metadata, (Metadata{{"format", "pt"}}));
  const HfWeights loaded = open_hf_weights(dir.path());
  expect_same_tensors(loaded, weights);
  EXPECT_THAT(loaded.names(), ElementsAre("lm_head.weight", "model.embed_tokens.weight", "model.norm.weight"));
  EXPECT_EQ(loaded.file_of("model.norm.weight"), (dir / "model.safetensors").string());
  // The BF16 file loads into f32 exactly: each value is the master value rounded to nearest even.
  const std::vector<float> widened = tensor_to_f32(loaded.at("lm_head.weight"));
  ASSERT_EQ(widened.size(), master.size());
  for (size_t i = 0; i < master.size(); ++i) EXPECT_EQ(widened[i], round_bf16(master[i])) << i;
  EXPECT_EQ(widened[1], 1.0f);  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to even
  EXPECT_EQ(tensor_to_f32(loaded.at("model.norm.weight")), weights.values[1]);
}

// The index, byte for byte as transformers writes it (json.dumps(indent=2, sort_keys=True) + "\n"),
// and huggingface_hub's split: a tensor over the limit gets its own shard ahead of the one being filled.
TEST(HfModel, ShardsAndIndexAreWrittenAsTransformersWritesThem) {
  const testing::TempDir dir("hf_model");
  Weights weights;
  weights.add("b", {16}, 0.0f);    // 64 bytes
  weights.add("big", {50}, 1.0f);  // 200 bytes: over the limit
  weights.add("a", {16}, 2.0f);    // b + a = 128 <= 150
  weights.add("c", {10}, 3.0f);    // 128 + 40 > 150: a new shard
  EXPECT_THAT(write_hf_model_weights(dir.path(), weights.views, 150),
              ElementsAre("model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                          "model-00003-of-00003.safetensors"));
  EXPECT_EQ(read_text(dir / "model.safetensors.index.json"),
            "{\n"
            "  \"metadata\": {\n"
            "    \"total_parameters\": 92,\n"
            "    \"total_size\": 368\n"
            "  },\n"
            "  \"weight_map\": {\n"
            "    \"a\": \"model-00002-of-00003.safetensors\",\n"
            "    \"b\": \"model-00002-of-00003.safetensors\",\n"
            "    \"big\": \"model-00001-of-00003.safetensors\",\n"
            "    \"c\": \"model-00003-of-00003.safetensors\"\n"
            "  }\n"
            "}\n");
  for (const char* shard : {"model-00001-of-00003.safetensors", "model-00003-of-00003.safetensors"}) {
    EXPECT_EQ(read_safetensors(dir / shard).metadata, (Metadata{{"format", "pt"}}));
  }
  const HfWeights loaded = open_hf_weights(dir.path());
  expect_same_tensors(loaded, weights);
  EXPECT_EQ(loaded.file_of("a"), (dir / "model-00002-of-00003.safetensors").string());
  EXPECT_EQ(loaded.directory(), dir.path());
}

TEST(HfModel, ASaveRemovesTheFilesOfAnEarlierSaveItDoesNotUse) {
  const testing::TempDir dir("hf_model");
  Weights weights;
  for (int i = 0; i < 4; ++i) weights.add(fmt::format("w{}", i), {16}, static_cast<float>(i));
  std::ofstream(dir / "config.json") << "{}";
  std::ofstream(dir / "model-extra.safetensors") << "not ours";
  write_hf_model_weights(dir.path(), weights.views, 64);  // four shards
  EXPECT_EQ(files_in(dir.path()).size(), 7u);
  write_hf_model_weights(dir.path(), weights.views, 128);  // two shards: the four are stale
  EXPECT_THAT(files_in(dir.path()),
              ElementsAre("config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                          "model-extra.safetensors", "model.safetensors.index.json"));
  expect_same_tensors(open_hf_weights(dir.path()), weights);
  write_hf_model_weights(dir.path(), weights.views);  // one file: shards and index are stale
  EXPECT_THAT(files_in(dir.path()), ElementsAre("config.json", "model-extra.safetensors", "model.safetensors"));
  write_hf_model_weights(dir.path(), weights.views, 128);  // sharded again: model.safetensors would shadow it
  EXPECT_THAT(files_in(dir.path()),
              ElementsAre("config.json", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                          "model-extra.safetensors", "model.safetensors.index.json"));
  expect_same_tensors(open_hf_weights(dir.path()), weights);
}

// A save that fails part-way (here: a directory where its second shard goes) leaves the earlier
// save whole: its index and shards are only replaced or removed once the new set is complete.
TEST(HfModel, AFailedSaveLeavesTheEarlierSaveLoadable) {
  const testing::TempDir dir("hf_model");
  Weights weights;
  for (int i = 0; i < 3; ++i) weights.add(fmt::format("w{}", i), {16}, static_cast<float>(i));
  write_hf_model_weights(dir.path(), weights.views, 64);  // three shards
  const std::string index = read_text(dir / "model.safetensors.index.json");
  fs::create_directory(dir / "model-00002-of-00002.safetensors");
  EXPECT_THAT(error_of([&] { write_hf_model_weights(dir.path(), weights.views, 128); }),
              HasSubstr("cannot replace " + (dir / "model-00002-of-00002.safetensors").string()));
  EXPECT_EQ(read_text(dir / "model.safetensors.index.json"), index);
  expect_same_tensors(open_hf_weights(dir.path()), weights);
  // Between a sharded save's index and its removal of an earlier model.safetensors, both are complete:
  // the reader, like transformers, takes model.safetensors.
  Weights single;
  single.add("only", {2}, 0.0f);
  write_hf_model_weights(dir / "other", single.views);
  fs::copy_file(dir / "other" / "model.safetensors", dir / "model.safetensors");
  EXPECT_THAT(open_hf_weights(dir.path()).names(), ElementsAre("only"));
}

TEST(HfModel, WritesFp8CodesAndEachShardsOwnMetadata) {
  const testing::TempDir dir("hf_model");
  Weights weights;
  weights.add("scale", {4}, 1.0f);
  const std::vector<uint8_t> codes{0x38, 0x40, 0xB8, 0x7E};
  weights.views.push_back({"codes", Dtype::F8_E4M3, {2, 2}, std::as_bytes(std::span(codes))});
  const auto names = [](std::span<const TensorView> shard) {
    std::string joined;
    for (const TensorView& t : shard) joined += t.name + ";";
    return Metadata{{"tensors", joined}, {"format", "not pt"}};
  };
  write_hf_model_weights(dir.path(), weights.views, 16, names);  // one tensor per shard
  const HfWeights loaded = open_hf_weights(dir.path());
  EXPECT_EQ(loaded.at("codes").dtype, Dtype::F8_E4M3);
  EXPECT_EQ(read_safetensors(loaded.file_of("codes")).metadata, (Metadata{{"format", "pt"}, {"tensors", "codes;"}}));
  EXPECT_EQ(read_safetensors(loaded.file_of("scale")).metadata, (Metadata{{"format", "pt"}, {"tensors", "scale;"}}));
}

TEST(HfModel, TheWriterRefusesBadTensorsBeforeWritingAnything) {
  const testing::TempDir dir("hf_model");
  Weights weights;
  weights.add("a", {4}, 0.0f);
  weights.add("b", {4}, 0.0f);
  write_hf_model_weights(dir.path(), weights.views, 16);
  const std::string index = read_text(dir / "model.safetensors.index.json");

  auto error_writing = [&](std::vector<TensorView> tensors) {
    return error_of([&] { write_hf_model_weights(dir.path(), tensors, 1); });
  };
  std::vector<TensorView> f16 = weights.views;
  f16[1].dtype = Dtype::F16;
  f16[1].shape = {8};
  EXPECT_EQ(error_writing(f16), "HF weight \"b\" is F16; write BF16, F32 or FP8 (f32_to_bf16 converts)");
  std::vector<TensorView> twice = weights.views;
  twice[1].name = "a";
  EXPECT_EQ(error_writing(twice), "two HF weights are named \"a\"; names must be unique");
  std::vector<TensorView> short_data = weights.views;
  short_data[1].shape = {5};
  EXPECT_EQ(error_writing(short_data), "tensor \"b\" holds 16 bytes but shape [5] of F32 needs 20");
  EXPECT_EQ(error_writing({}), "no tensors to write as HF model weights");
  EXPECT_EQ(error_of([&] { write_hf_model_weights(dir.path(), weights.views, 0); }),
            "the maximum shard size must be positive");
  // The earlier save is untouched.
  EXPECT_THAT(files_in(dir.path()), ElementsAre("model-00001-of-00002.safetensors",
                                                "model-00002-of-00002.safetensors", "model.safetensors.index.json"));
  EXPECT_EQ(read_text(dir / "model.safetensors.index.json"), index);
}

// A sharded save of a, b (first shard) and c (second), for the reader's error cases.
struct ShardedSave {
  testing::TempDir dir{"hf_model"};
  Weights weights;
  fs::path index = dir / "model.safetensors.index.json";
  fs::path first = dir / "model-00001-of-00002.safetensors";
  fs::path second = dir / "model-00002-of-00002.safetensors";

  ShardedSave() {
    weights.add("a", {2}, 0.0f);
    weights.add("b", {2}, 1.0f);
    weights.add("c", {4}, 2.0f);
    write_hf_model_weights(dir.path(), weights.views, 16);
  }
  std::string open_error() const {
    return error_of([&] { open_hf_weights(dir.path()); });
  }
  // Rewrites `shard` to hold `tensors` of the saved ones.
  void rewrite(const fs::path& shard, const std::vector<size_t>& tensors) const {
    SafetensorsFile file{{{"format", "pt"}}, {}};
    for (size_t i : tensors) file.tensors.push_back(f32_tensor(weights.views[i].name, weights.views[i].shape,
                                                               weights.values[i]));
    write_safetensors(shard, file);
  }
};

TEST(HfModel, MissingTensorsAndWrongShapesAreOneLineErrors) {
  const ShardedSave save;
  const HfWeights loaded = open_hf_weights(save.dir.path());
  EXPECT_EQ(loaded.find("model.layers.3.mlp.up_proj.weight"), nullptr);
  EXPECT_EQ(error_of([&] { loaded.at("model.layers.3.mlp.up_proj.weight"); }),
            "model.layers.3.mlp.up_proj.weight is missing from " + save.dir.path().string());
  const std::vector<int64_t> shape{2, 2};
  EXPECT_EQ(error_of([&] { loaded.at("c", shape); }),
            "c in " + save.second.string() + " has shape [4] but the model needs [2, 2]");
  EXPECT_EQ(loaded.at("c", std::vector<int64_t>{4}).data.size(), 16u);
}

TEST(HfModel, RefusesATruncatedShard) {
  const ShardedSave save;
  fs::resize_file(save.second, fs::file_size(save.second) - 4);
  EXPECT_EQ(save.open_error(),
            save.second.string() + ": tensor \"c\" has data_offsets [0, 16] that run past the end of the data (12 "
                                   "bytes)");
}

// A header whose dtype disagrees with the tensor's byte count (F32 edited to F64 in place).
TEST(HfModel, RefusesAShardWhoseDtypeDisagreesWithItsBytes) {
  const ShardedSave save;
  std::string bytes = read_text(save.second);
  const size_t at = bytes.find("\"F32\"");
  ASSERT_NE(at, std::string::npos);
  bytes.replace(at, 5, "\"F64\"");
  std::ofstream(save.second, std::ios::binary | std::ios::trunc) << bytes;
  EXPECT_EQ(save.open_error(), save.second.string() + ": tensor \"c\" has data_offsets [0, 16] (16 bytes) but its "
                                                      "shape [4] of F64 needs 32 bytes");
}

TEST(HfModel, RefusesAnIndexThatDisagreesWithItsShards) {
  {
    const ShardedSave save;
    save.rewrite(save.first, {0});  // b dropped
    EXPECT_EQ(save.open_error(), save.index.string() + " puts tensor \"b\" in " + save.first.string() +
                                     ", which does not hold it");
  }
  {
    const ShardedSave save;
    save.rewrite(save.second, {2, 0});  // a in both shards
    EXPECT_EQ(save.open_error(), "tensor \"a\" is in both " + save.first.string() + " and " + save.second.string() +
                                     "; a name must be in one file only");
  }
  {
    const ShardedSave save;
    save.rewrite(save.second, {2, 1});  // b moved to the second shard
    save.rewrite(save.first, {0});
    EXPECT_EQ(save.open_error(),
              "tensor \"b\" is in " + save.second.string() + " but " + save.index.string() +
                  " puts it in model-00001-of-00002.safetensors");
  }
  {
    const ShardedSave save;
    SafetensorsFile file{{{"format", "pt"}}, {}};
    file.tensors.push_back(f32_tensor("c", {4}, save.weights.values[2]));
    file.tensors.push_back(f32_tensor("d", {1}, std::vector<float>{5.0f}));
    write_safetensors(save.second, file);
    EXPECT_EQ(save.open_error(), "tensor \"d\" in " + save.second.string() + " is not in the weight_map of " +
                                     save.index.string() + "; the index is stale");
  }
  {
    const ShardedSave save;
    fs::remove(save.second);
    EXPECT_EQ(save.open_error(), save.index.string() + " puts tensors in " + save.second.string() +
                                     ", which does not exist; the save is incomplete");
  }
}

TEST(HfModel, RefusesMalformedIndexes) {
  const ShardedSave save;
  auto with_index = [&](std::string_view text) {
    std::ofstream(save.index, std::ios::trunc) << text;
    return save.open_error();
  };
  EXPECT_THAT(with_index("{\"weight_map\": {\"a\": "),
              HasSubstr(save.index.string() + " is not valid JSON ("));
  EXPECT_EQ(with_index("[]"), save.index.string() + " has no \"weight_map\" object; it is not a safetensors index");
  EXPECT_EQ(with_index("{\"weight_map\": {}}"), save.index.string() + " lists no tensors in its weight_map");
  EXPECT_EQ(with_index("{\"weight_map\": {\"a\": 1}}"),
            save.index.string() + ": the weight_map entry of \"a\" is number, not a file name");
  EXPECT_EQ(with_index("{\"weight_map\": {\"a\": \"../model-00001-of-00002.safetensors\"}}"),
            save.index.string() + ": tensor \"a\" is in \"../model-00001-of-00002.safetensors\", which is not a file "
                                  "name beside the index");
  for (const char* error : {"{\"weight_map\": {\"a\": \"\"}}", "{\"weight_map\": {\"a\": \"..\"}}"}) {
    EXPECT_THAT(with_index(error), HasSubstr("which is not a file name beside the index"));
  }
}

TEST(HfModel, RefusesDirectoriesWithoutWeights) {
  const testing::TempDir dir("hf_model");
  EXPECT_EQ(error_of([&] { open_hf_weights(dir.path()); }),
            dir.path().string() +
                " holds neither model.safetensors nor model.safetensors.index.json; save the model with safetensors "
                "weights");
  EXPECT_EQ(error_of([&] { open_hf_weights(dir / "missing"); }),
            (dir / "missing").string() + " is not a directory; give a Hugging Face model directory");
  std::ofstream(dir / "model.safetensors").close();
  EXPECT_THAT(error_of([&] { open_hf_weights(dir.path()); }), HasSubstr("model.safetensors: 0 bytes is too short"));
}

TEST(HfModel, Bf16ConversionsRoundToNearestEvenAndWidenExactly) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> values{0.0f, -0.0f, 1.0f, 1.00390625f, 1.01171875f, 3.0e38f, -inf, 1e-40f};
  const std::vector<uint16_t> bits = f32_to_bf16(values);
  EXPECT_THAT(bits, ElementsAre(0x0000, 0x8000, 0x3F80, 0x3F80, 0x3F82, 0x7F62, 0xFF80, 0x0001));
  EXPECT_TRUE(std::isnan(bf16_to_float(f32_to_bf16(std::vector<float>{NAN})[0])));
  // Mapped data need not be aligned: widen from an odd address.
  std::vector<std::byte> unaligned(1 + bits.size() * 2);
  std::memcpy(unaligned.data() + 1, bits.data(), bits.size() * 2);
  const TensorView view{"w", Dtype::BF16, {8}, std::span(unaligned).subspan(1)};
  const std::vector<float> widened = tensor_to_f32(view);
  for (size_t i = 0; i < bits.size(); ++i) EXPECT_EQ(widened[i], bf16_to_float(bits[i])) << i;
  std::vector<float> too_small(3);
  EXPECT_EQ(error_of([&] { tensor_to_f32(view, too_small); }), "tensor \"w\" holds 8 values but room for 3 was given");
  const TensorView ints{"ids", Dtype::I32, {4}, std::span(unaligned).subspan(0, 16)};
  EXPECT_EQ(error_of([&] { tensor_to_f32(ints); }),
            "tensor \"ids\" is I32; only BF16, F16 and F32 weights can be loaded");
}

// Models saved in float16 (torch_dtype "float16") load: every half widens exactly, from any address.
TEST(HfModel, F16WeightsWidenExactly) {
  const std::vector<uint16_t> bits{0x0000, 0x8000, 0x3C00, 0xC000, 0x7BFF, 0x0001, 0x03FF, 0x0400, 0x7C00, 0xFC00,
                                   0x3555, 0x7E00};
  std::vector<std::byte> unaligned(1 + bits.size() * 2);
  std::memcpy(unaligned.data() + 1, bits.data(), bits.size() * 2);
  const std::vector<float> widened = tensor_to_f32({"w", Dtype::F16, {12}, std::span(unaligned).subspan(1)});
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_THAT(std::vector<float>(widened.begin(), widened.end() - 1),
              ElementsAre(0.0f, -0.0f, 1.0f, -2.0f, 65504.0f, 0x1p-24f, 0x3FFp-24f, 0x1p-14f, inf, -inf,
                          0x1.554p-2f));
  EXPECT_TRUE(std::signbit(widened[1]));
  EXPECT_TRUE(std::isnan(widened.back()));
}

TEST(HfModel, ViewsStayValidWhenTheWeightsAreMoved) {
  const ShardedSave save;
  HfWeights loaded = open_hf_weights(save.dir.path());
  const TensorView* c = &loaded.at("c");
  const HfWeights moved = std::move(loaded);
  EXPECT_EQ(&moved.at("c"), c);
  EXPECT_EQ(tensor_to_f32(*c), save.weights.values[2]);
}

}  // namespace
}  // namespace fp8kit::io
