// A Llama model directory end to end: a preset's weights, held as f32 masters, saved as BF16 shards
// with config.json beside them, then read back by name and shape into f32; save_pretrained's shards
// as transformers' save_pretrained cuts them; tokenizer_config.json for transformers' AutoTokenizer.
#include "common/error_of.h"
#include "common/temp_dir.h"
#include "io/hf_model.h"
#include "models/llama_config.h"
#include "models/llama_io.h"
#include "numerics/cast.h"
#include "text/bpe_learner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <random>

namespace fp8kit::models {
namespace {

TEST(LlamaHfModel, MasterWeightsSavedAsBf16LoadBackRoundedToNearestEven) {
  const testing::TempDir dir("llama_hf_model");
  const LlamaConfig config = llama_preset("tiny", 96);
  const std::vector<WeightShape> weights = llama_weights(config);
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<std::vector<float>> masters;
  std::vector<std::vector<uint16_t>> bf16;
  std::vector<io::TensorView> views;
  for (const WeightShape& weight : weights) {
    int64_t count = 1;
    for (int64_t dim : weight.shape) count *= dim;
    auto& master = masters.emplace_back(count);
    for (float& value : master) value = normal(rng);
    bf16.push_back(io::f32_to_bf16(master));
    views.push_back({weight.name, io::Dtype::BF16, weight.shape, std::as_bytes(std::span(bf16.back()))});
  }
  write_llama_config(dir.path(), config);
  const auto files = io::write_hf_model_weights(dir.path(), views, 40'000);  // a few shards
  EXPECT_GT(files.size(), 2u);

  EXPECT_EQ(read_llama_config(dir.path()), config);
  const io::HfWeights loaded = io::open_hf_weights(dir.path());
  EXPECT_EQ(loaded.size(), weights.size());
  EXPECT_EQ(parameter_count(config), 115'008 - 256 * 64 + 96 * 64);
  for (size_t i = 0; i < weights.size(); ++i) {
    const std::vector<float> values = io::tensor_to_f32(loaded.at(weights[i].name, weights[i].shape));
    ASSERT_EQ(values.size(), masters[i].size());
    for (size_t k = 0; k < values.size(); ++k) ASSERT_EQ(values[k], round_bf16(masters[i][k])) << weights[i].name;
  }
  // A config with more layers than the files hold: the first missing weight is named.
  LlamaConfig deeper = config;
  deeper.num_hidden_layers = 3;
  const WeightShape missing = llama_layer_weights(deeper, 2)[0];
  EXPECT_EQ(testing::error_of([&] { loaded.at(missing.name, missing.shape); }),
            "model.layers.2.self_attn.q_proj.weight is missing from " + dir.path().string());
}

// Shards are filled in the order of transformers' state dict (llama_weights: q, k, v, o, gate, up,
// down, then the two norms of each layer), not the model's own parameter order, so that the same
// max_shard_size cuts the same shards as transformers' save_pretrained; with one tensor per shard,
// shard k holds the k-th weight. The index counts the parameters as transformers 5's does.
TEST(LlamaHfModel, SavePretrainedShardsInTransformersStateDictOrder) {
  const testing::TempDir dir("llama_hf_order");
  const LlamaConfig config = llama_preset("tiny", 96);
  Llama model(config, 0, Device::Cpu);
  save_pretrained(model, dir.path(), 1);
  std::ifstream in(dir / "model.safetensors.index.json");
  const nlohmann::json index = nlohmann::json::parse(in);
  const std::vector<WeightShape> weights = llama_weights(config);
  ASSERT_EQ(index["weight_map"].size(), weights.size());
  for (size_t i = 0; i < weights.size(); ++i) {
    EXPECT_EQ(index["weight_map"][weights[i].name], fmt::format("model-{:05}-of-{:05}.safetensors", i + 1, weights.size()))
        << weights[i].name;
  }
  EXPECT_EQ(index["metadata"]["total_parameters"], parameter_count(config));
  EXPECT_EQ(index["metadata"]["total_size"], 2 * parameter_count(config));
}

// A tied model's file that keeps lm_head.weight loads when it is the embedding (transformers loads
// such files); a different head means the config is wrong.
TEST(LlamaHfModel, TiedModelsMayKeepTheirHeadWhenItIsTheEmbedding) {
  const testing::TempDir dir("llama_tied_head");
  const LlamaConfig config = llama_preset("tiny", 64);
  std::vector<std::vector<float>> values;
  std::vector<io::TensorView> views;
  for (const WeightShape& weight : llama_weights(config)) {
    int64_t count = 1;
    for (int64_t dim : weight.shape) count *= dim;
    values.emplace_back(count, 0.5f);
    views.push_back({weight.name, io::Dtype::F32, weight.shape, std::as_bytes(std::span(values.back()))});
  }
  std::vector<float> head = values.front();  // model.embed_tokens.weight's
  views.push_back({"lm_head.weight", io::Dtype::F32, views.front().shape, std::as_bytes(std::span(head))});
  write_llama_config(dir.path(), config);
  io::write_hf_model_weights(dir.path(), views);
  EXPECT_EQ(load_pretrained(dir.path()).config(), config);
  head[3] = 0.25f;
  io::write_hf_model_weights(dir.path(), views);
  EXPECT_EQ(testing::error_of([&] { load_pretrained(dir.path()); }),
            "lm_head.weight in " + (dir / "model.safetensors").string() + " differs from model.embed_tokens.weight, "
            "but " + dir.path().string() + "/config.json ties them (tie_word_embeddings true): set it to false to use "
            "both");
}

// Without tokenizer_config.json, AutoTokenizer loads tokenizer.json with no EOS token (and may clean
// up spaces on decode).
TEST(LlamaHfModel, TokenizerConfigNamesTheSpecialTokensForAutoTokenizer) {
  const testing::TempDir dir("llama_tokenizer_config");
  const std::vector<std::string> texts{"the movie was great", "the film was awful"};
  const text::BpeTokenizer tokenizer = text::learn_bpe(texts, {.vocab_size = 270});
  LlamaConfig config = llama_preset("tiny", tokenizer.vocab_size());
  config.eos_token_id = *tokenizer.eos_id();
  write_tokenizer_config(dir.path(), tokenizer, config);
  std::ifstream in(dir / "tokenizer_config.json");
  EXPECT_EQ(nlohmann::json::parse(in), (nlohmann::json{{"tokenizer_class", "PreTrainedTokenizerFast"},
                                                       {"bos_token", nullptr},
                                                       {"eos_token", "<|endoftext|>"},
                                                       {"model_max_length", 256},
                                                       {"clean_up_tokenization_spaces", false}}));
  config.bos_token_id = *tokenizer.token_id(" ");  // an ordinary token: its tokenizer.json spelling
  write_tokenizer_config(dir.path(), tokenizer, config);
  std::ifstream again(dir / "tokenizer_config.json");
  EXPECT_EQ(nlohmann::json::parse(again)["bos_token"], "\u0120");
  config.eos_token_id = 1000;
  EXPECT_EQ(testing::error_of([&] { write_tokenizer_config(dir.path(), tokenizer, config); }),
            fmt::format("token id 1000 of the config is outside the tokenizer's {} tokens", tokenizer.vocab_size()));
}

}  // namespace
}  // namespace fp8kit::models
