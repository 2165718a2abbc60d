// Llama configs: real config.json files as transformers writes them (TinyLlama 1.1B, Llama 3.2 1B),
// the written form, round trips, every validation error, the presets' parameter counts, FLOPs per
// token and the HF weight names.
#include "models/llama_config.h"

#include "common/error_of.h"
#include "common/read_text.h"
#include "common/temp_dir.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>


namespace fp8kit::models {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::error_of;
using testing::read_text;
using nlohmann::json;

const std::string kData = FP8KIT_SOURCE_DIR "/tests/models/data/";

// A minimal valid config, as JSON to mutate.
json minimal() {
  return {{"model_type", "llama"}, {"vocab_size", 100},      {"hidden_size", 64},
          {"intermediate_size", 128}, {"num_hidden_layers", 2}, {"num_attention_heads", 4}};
}

std::string parse_error(const json& config) {
  return error_of([&] { parse_llama_config(config.dump(), "config.json"); });
}

TEST(LlamaConfig, ReadsTinyLlamaAsTransformersWroteIt) {
  const LlamaConfig c = read_llama_config(kData + "tinyllama_1.1b_config.json");
  EXPECT_EQ(c.vocab_size, 32000);
  EXPECT_EQ(c.hidden_size, 2048);
  EXPECT_EQ(c.intermediate_size, 5632);
  EXPECT_EQ(c.num_hidden_layers, 22);
  EXPECT_EQ(c.num_attention_heads, 32);
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 64);  // derived: the file has no head_dim
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_id, 2);
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(parameter_count(c), 1'100'048'384);  // TinyLlama's published count
}

TEST(LlamaConfig, RefusesLlama3RopeScalingAndReadsTheRestOfLlama32) {
  const std::string path = kData + "llama3.2_1b_config.json";
  EXPECT_EQ(error_of([&] { read_llama_config(path); }),
            path + ": rope_scaling of type \"llama3\" is not supported; fp8kit's Llama uses plain RoPE (rope_scaling "
                   "null or {\"rope_type\": \"default\"})");
  json config = json::parse(read_text(path));
  config["rope_scaling"] = nullptr;
  const LlamaConfig c = parse_llama_config(config.dump());
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.num_key_value_heads, 8);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, 128000);
  EXPECT_EQ(parameter_count(c), 1'235'814'400);  // Llama 3.2 1B's published count
}

// transformers 5 writes rope_theta inside "rope_parameters" (and no top-level rope_theta or
// rope_scaling): a theta other than 10000 must be read from there, not defaulted.
TEST(LlamaConfig, ReadsTransformers5RopeParameters) {
  const LlamaConfig c = read_llama_config(kData + "transformers5_llama_config.json");
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.torch_dtype, "bfloat16");  // "dtype", transformers 5's name for torch_dtype
  EXPECT_EQ(c.num_key_value_heads, 2);
  EXPECT_TRUE(c.tie_word_embeddings);
  json config = minimal();
  config["rope_parameters"] = {{"rope_type", "llama3"}, {"rope_theta", 500000.0}, {"factor", 32.0}};
  EXPECT_EQ(parse_error(config), "config.json: rope_parameters of type \"llama3\" is not supported; fp8kit's Llama "
                                 "uses plain RoPE (rope_scaling null or {\"rope_type\": \"default\"})");
  config["rope_parameters"] = 2;
  EXPECT_EQ(parse_error(config), "config.json: \"rope_parameters\" must be null or an object, not 2");
}

TEST(LlamaConfig, WritesWhatTransformersWrites) {
  const testing::TempDir dir("llama_config");
  LlamaConfig c = llama_preset("tiny", 256);
  c.bos_token_id = 1;
  write_llama_config(dir / "model", c);  // a directory, created
  EXPECT_EQ(read_text(dir / "model" / "config.json"),
            R"({
  "architectures": [
    "LlamaForCausalLM"
  ],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": 1,
  "eos_token_id": null,
  "head_dim": 16,
  "hidden_act": "silu",
  "hidden_size": 64,
  "initializer_range": 0.02,
  "intermediate_size": 192,
  "max_position_embeddings": 256,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 4,
  "num_hidden_layers": 2,
  "num_key_value_heads": 2,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-05,
  "rope_scaling": null,
  "rope_theta": 10000.0,
  "tie_word_embeddings": true,
  "torch_dtype": "bfloat16",
  "use_cache": true,
  "vocab_size": 256
}
)");
}

TEST(LlamaConfig, RoundTripsThroughAFileOrADirectory) {
  const testing::TempDir dir("llama_config");
  for (std::string_view name : llama_preset_names()) {
    LlamaConfig c = llama_preset(name, 32000);
    c.eos_token_id = 2;
    c.rms_norm_eps = 1e-6;
    c.rope_theta = 123456.789;
    c.torch_dtype = "float32";
    write_llama_config(dir / "config.json", c);
    EXPECT_EQ(read_llama_config(dir / "config.json"), c) << name;
    EXPECT_EQ(read_llama_config(dir.path()), c) << name;
  }
  LlamaConfig invalid = llama_preset("tiny", 256);
  invalid.head_dim = 15;
  EXPECT_EQ(error_of([&] { write_llama_config(dir / "config.json", invalid); }),
            (dir / "config.json").string() + ": head_dim 15 must be even (RoPE rotates pairs of dimensions)");
  EXPECT_EQ(read_llama_config(dir.path()).torch_dtype, "float32");  // the last good one is still there
  EXPECT_THAT(error_of([&] { read_llama_config(dir / "missing.json"); }),
              HasSubstr("cannot open " + (dir / "missing.json").string()));
}

TEST(LlamaConfig, AbsentKeysTakeTransformersDefaultsAndUnknownKeysAreIgnored) {
  json config = minimal();
  config["some_future_key"] = {{"nested", true}};
  config["num_key_value_heads"] = nullptr;
  const LlamaConfig c = parse_llama_config(config.dump());
  EXPECT_EQ(c.num_key_value_heads, 4);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.max_position_embeddings, 2048);
  EXPECT_EQ(c.rms_norm_eps, 1e-6);
  EXPECT_EQ(c.rope_theta, 10000.0);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.bos_token_id, -1);
  EXPECT_EQ(c.eos_token_id, -1);
  EXPECT_EQ(c.torch_dtype, "float32");

  config["eos_token_id"] = {7, 8, 9};  // Llama 3 instruct models list several
  config["dtype"] = "bfloat16";        // newer transformers' spelling
  config["rope_scaling"] = {{"type", "default"}};
  config["hidden_size"] = 60;  // not divisible by 4 heads: fine with head_dim given
  config["head_dim"] = 32;
  const LlamaConfig d = parse_llama_config(config.dump());
  EXPECT_EQ(d.eos_token_id, 7);
  EXPECT_EQ(d.torch_dtype, "bfloat16");
  EXPECT_EQ(d.head_dim, 32);
  EXPECT_EQ(llama_layer_weights(d, 0)[0].shape, (std::vector<int64_t>{128, 60}));
}

TEST(LlamaConfig, RefusesWhatFp8kitsLlamaDoesNotImplement) {
  const auto with = [](const char* key, json value) {
    json config = minimal();
    config[key] = std::move(value);
    return parse_error(config);
  };
  EXPECT_EQ(with("model_type", "mistral"),
            "config.json: model_type \"mistral\" is not supported; fp8kit reads Llama configs (model_type \"llama\")");
  json untyped = minimal();
  untyped.erase("model_type");
  EXPECT_EQ(parse_error(untyped),
            "config.json: \"model_type\" is missing; fp8kit reads Llama configs (model_type \"llama\")");
  EXPECT_EQ(with("hidden_act", "gelu"),
            "config.json: hidden_act \"gelu\" is not supported; fp8kit's Llama uses SwiGLU (\"silu\")");
  EXPECT_EQ(with("attention_bias", true), "config.json: \"attention_bias\" is true, but fp8kit's Llama has no biases");
  EXPECT_EQ(with("mlp_bias", true), "config.json: \"mlp_bias\" is true, but fp8kit's Llama has no biases");
  EXPECT_EQ(with("rope_scaling", {{"type", "linear"}, {"factor", 2.0}}),
            "config.json: rope_scaling of type \"linear\" is not supported; fp8kit's Llama uses plain RoPE "
            "(rope_scaling null or {\"rope_type\": \"default\"})");
  EXPECT_EQ(with("rope_scaling", 2), "config.json: \"rope_scaling\" must be null or an object, not 2");
}

TEST(LlamaConfig, RefusesMalformedValues) {
  const auto with = [](const char* key, json value) {
    json config = minimal();
    config[key] = std::move(value);
    return parse_error(config);
  };
  EXPECT_THAT(error_of([] { parse_llama_config("{\"model_type\": ", "config.json"); }),
              HasSubstr("config.json is not valid JSON ("));
  EXPECT_EQ(parse_error(json::array()), "config.json: a config must be a JSON object, not array");
  json missing = minimal();
  missing.erase("vocab_size");
  EXPECT_EQ(parse_error(missing), "config.json: \"vocab_size\" is missing; a Llama config needs it");
  EXPECT_EQ(with("hidden_size", 64.5), "config.json: \"hidden_size\" must be an integer, not 64.5");
  EXPECT_EQ(with("hidden_size", "64"), "config.json: \"hidden_size\" must be an integer, not \"64\"");
  EXPECT_EQ(with("num_hidden_layers", 18446744073709551615ull),
            "config.json: \"num_hidden_layers\" must be an integer, not 18446744073709551615");
  EXPECT_EQ(with("rms_norm_eps", "1e-5"), "config.json: \"rms_norm_eps\" must be a number, not \"1e-5\"");
  EXPECT_EQ(with("tie_word_embeddings", 1), "config.json: \"tie_word_embeddings\" must be true or false, not 1");
  EXPECT_EQ(with("torch_dtype", 16), "config.json: \"torch_dtype\" must be a string, not 16");
  EXPECT_EQ(with("hidden_size", 66),
            "config.json: hidden_size 66 is not divisible by num_attention_heads 4; give head_dim or fix the sizes");
  EXPECT_EQ(with("num_attention_heads", 0),
            "config.json: hidden_size 64 is not divisible by num_attention_heads 0; give head_dim or fix the sizes");
}

TEST(LlamaConfig, ValidatesEveryField) {
  const LlamaConfig good = llama_preset("tiny", 256);
  EXPECT_NO_THROW(validate_llama_config(good));
  struct Case {
    void (*mutate)(LlamaConfig&);
    std::string message;
  };
  const Case cases[] = {
      {[](LlamaConfig& c) { c.vocab_size = 0; }, "vocab_size must be positive, not 0"},
      {[](LlamaConfig& c) { c.hidden_size = -64; }, "hidden_size must be positive, not -64"},
      {[](LlamaConfig& c) { c.intermediate_size = 0; }, "intermediate_size must be positive, not 0"},
      {[](LlamaConfig& c) { c.num_hidden_layers = 0; }, "num_hidden_layers must be positive, not 0"},
      {[](LlamaConfig& c) { c.num_attention_heads = 0; }, "num_attention_heads must be positive, not 0"},
      {[](LlamaConfig& c) { c.num_key_value_heads = 0; }, "num_key_value_heads must be positive, not 0"},
      {[](LlamaConfig& c) { c.head_dim = 0; }, "head_dim must be positive, not 0"},
      {[](LlamaConfig& c) { c.max_position_embeddings = 0; }, "max_position_embeddings must be positive, not 0"},
      {[](LlamaConfig& c) { c.num_key_value_heads = 3; },
       "num_attention_heads 4 is not a multiple of num_key_value_heads 3; each key/value head must serve the same "
       "number of query heads"},
      {[](LlamaConfig& c) { c.head_dim = 9; }, "head_dim 9 must be even (RoPE rotates pairs of dimensions)"},
      {[](LlamaConfig& c) { c.rms_norm_eps = 0; }, "rms_norm_eps must be positive and finite, not 0"},
      {[](LlamaConfig& c) { c.rope_theta = -1; }, "rope_theta must be positive and finite, not -1"},
      {[](LlamaConfig& c) { c.bos_token_id = 256; }, "bos_token_id 256 is outside the vocabulary of 256 tokens"},
      {[](LlamaConfig& c) { c.eos_token_id = -2; }, "eos_token_id -2 is outside the vocabulary of 256 tokens"},
      {[](LlamaConfig& c) { c.torch_dtype = "float8"; },
       "torch_dtype \"float8\" is not one of float32, bfloat16, float16"},
  };
  for (const Case& test : cases) {
    LlamaConfig c = good;
    test.mutate(c);
    EXPECT_EQ(error_of([&] { validate_llama_config(c, "cfg"); }), "cfg: " + test.message);
    // parse applies the same checks to what it read
    EXPECT_EQ(error_of([&] { parse_llama_config(llama_config_json(c), "cfg"); }), "cfg: " + test.message);
  }
}

TEST(LlamaConfig, PresetsAndTheirParameterCounts) {
  EXPECT_THAT(llama_preset_names(), ElementsAre("tiny", "25m", "gpt2-small", "1b", "8b"));
  // Embedding V * H, per layer attention H * (2 heads + 2 kv heads) * head_dim, MLP 3 H F, norms 2 H;
  // the final norm H; lm_head V * H when untied.
  EXPECT_EQ(parameter_count(llama_preset("tiny", 256)), 256 * 64 + 2 * (64 * 16 * (8 + 4) + 3 * 64 * 192 + 128) + 64);
  EXPECT_EQ(parameter_count(llama_preset("tiny", 256)), 115'008);
  EXPECT_EQ(parameter_count(llama_preset("25m", 8192)), 24'501'760);
  EXPECT_EQ(parameter_count(llama_preset("gpt2-small", 50257)), 123'551'232);
  EXPECT_EQ(parameter_count(llama_preset("1b", 128256)), 1'498'482'688);  // Llama 3.2 1B, untied
  EXPECT_EQ(parameter_count(llama_preset("8b", 128256)), 8'030'261'248);  // Llama 3 8B
  const LlamaConfig big = llama_preset("1b", 128256);
  EXPECT_EQ(big.rope_theta, 500000.0);
  EXPECT_FALSE(big.tie_word_embeddings);
  EXPECT_EQ(big.head_dim, 64);
  const LlamaConfig small = llama_preset("25m", 8192);
  EXPECT_TRUE(small.tie_word_embeddings);
  EXPECT_EQ(small.rms_norm_eps, 1e-5);
  EXPECT_EQ(error_of([] { llama_preset("7b", 32000); }),
            "unknown Llama preset \"7b\" (known: tiny, 25m, gpt2-small, 1b, 8b)");
  EXPECT_EQ(error_of([] { llama_preset("tiny", 0); }), "Llama preset \"tiny\": vocab_size must be positive, not 0");
}

TEST(LlamaConfig, FlopsPerTokenFollowPalmsConvention) {
  // Tied: every parameter but none counted twice; 6 N + 12 L H Q T.
  EXPECT_EQ(flops_per_token(llama_preset("tiny", 256), 128), 6.0 * 115'008 + 12.0 * 2 * 4 * 16 * 128);
  // Untied: the input embedding table multiplies nothing.
  EXPECT_EQ(flops_per_token(llama_preset("1b", 128256), 2048), 6.0 * 1'235'814'400 + 12.0 * 16 * 32 * 64 * 2048);
}

TEST(LlamaConfig, WeightNamesAndShapesInHfOrder) {
  LlamaConfig c = llama_preset("tiny", 256);
  std::vector<std::string> names;
  for (const WeightShape& weight : llama_layer_weights(c, 3)) names.push_back(weight.name);
  EXPECT_THAT(names, ElementsAre("model.layers.3.self_attn.q_proj.weight", "model.layers.3.self_attn.k_proj.weight",
                                 "model.layers.3.self_attn.v_proj.weight", "model.layers.3.self_attn.o_proj.weight",
                                 "model.layers.3.mlp.gate_proj.weight", "model.layers.3.mlp.up_proj.weight",
                                 "model.layers.3.mlp.down_proj.weight", "model.layers.3.input_layernorm.weight",
                                 "model.layers.3.post_attention_layernorm.weight"));
  const std::vector<WeightShape> layer = llama_layer_weights(c, 0);
  using Shape = std::vector<int64_t>;
  EXPECT_EQ(layer[0].shape, (Shape{64, 64}));
  EXPECT_EQ(layer[1].shape, (Shape{32, 64}));
  EXPECT_EQ(layer[2].shape, (Shape{32, 64}));
  EXPECT_EQ(layer[3].shape, (Shape{64, 64}));
  EXPECT_EQ(layer[4].shape, (Shape{192, 64}));
  EXPECT_EQ(layer[5].shape, (Shape{192, 64}));
  EXPECT_EQ(layer[6].shape, (Shape{64, 192}));
  EXPECT_EQ(layer[7].shape, (Shape{64}));
  EXPECT_EQ(layer[8].shape, (Shape{64}));

  std::vector<WeightShape> all = llama_weights(c);
  ASSERT_EQ(all.size(), 1 + 2 * 9 + 1u);  // tied: no lm_head
  EXPECT_EQ(all.front().name, "model.embed_tokens.weight");
  EXPECT_EQ(all.front().shape, (Shape{256, 64}));
  EXPECT_EQ(all[1].name, "model.layers.0.self_attn.q_proj.weight");
  EXPECT_EQ(all.back().name, "model.norm.weight");
  c.tie_word_embeddings = false;
  all = llama_weights(c);
  EXPECT_EQ(all.back().name, "lm_head.weight");
  EXPECT_EQ(all.back().shape, (Shape{256, 64}));
}

}  // namespace
}  // namespace fp8kit::models
