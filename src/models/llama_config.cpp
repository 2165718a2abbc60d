// Llama config.json: transformers' keys and defaults, the checks that keep fp8kit's Llama to what it
// implements, the presets, and the counts derived from a config.
#include "models/llama_config.h"

#include "base/error.h"
#include "io/mapped_file.h"
#include "io/safetensors.h"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <array>
#include <cmath>

namespace fp8kit::models {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using io::printable;

// Present and not null.
bool given(const json& config, const char* key) { return config.contains(key) && !config[key].is_null(); }

int64_t integer(const json& value, const char* key, std::string_view source) {
  FP8KIT_CHECK(value.is_number_integer() &&
                   !(value.is_number_unsigned() && value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)),
               "{}: \"{}\" must be an integer, not {}", source, key, printable(value.dump()));
  return value.get<int64_t>();
}

int64_t required_integer(const json& config, const char* key, std::string_view source) {
  FP8KIT_CHECK(given(config, key), "{}: \"{}\" is missing; a Llama config needs it", source, key);
  return integer(config[key], key, source);
}

int64_t integer_or(const json& config, const char* key, int64_t fallback, std::string_view source) {
  return given(config, key) ? integer(config[key], key, source) : fallback;
}

double number_or(const json& config, const char* key, double fallback, std::string_view source) {
  if (!given(config, key)) return fallback;
  FP8KIT_CHECK(config[key].is_number(), "{}: \"{}\" must be a number, not {}", source, key,
               printable(config[key].dump()));
  return config[key].get<double>();
}

bool boolean_or(const json& config, const char* key, bool fallback, std::string_view source) {
  if (!given(config, key)) return fallback;
  FP8KIT_CHECK(config[key].is_boolean(), "{}: \"{}\" must be true or false, not {}", source, key,
               printable(config[key].dump()));
  return config[key].get<bool>();
}

std::string string_or(const json& config, const char* key, std::string_view fallback, std::string_view source) {
  if (!given(config, key)) return std::string(fallback);
  FP8KIT_CHECK(config[key].is_string(), "{}: \"{}\" must be a string, not {}", source, key,
               printable(config[key].dump()));
  return config[key].get<std::string>();
}

// A token id: an integer, null (-1), or a list of integers (the first; -1 when empty).
int64_t token_id(const json& config, const char* key, std::string_view source) {
  if (!given(config, key)) return -1;
  const json& value = config[key];
  if (!value.is_array()) return integer(value, key, source);
  return value.empty() ? -1 : integer(value[0], key, source);
}

void check_supported(const json& config, std::string_view source) {
  FP8KIT_CHECK(given(config, "model_type"), "{}: \"model_type\" is missing; fp8kit reads Llama configs "
               "(model_type \"llama\")", source);
  const std::string model_type = string_or(config, "model_type", "", source);
  FP8KIT_CHECK(model_type == "llama", "{}: model_type \"{}\" is not supported; fp8kit reads Llama configs "
               "(model_type \"llama\")", source, printable(model_type));
  const std::string act = string_or(config, "hidden_act", "silu", source);
  FP8KIT_CHECK(act == "silu", "{}: hidden_act \"{}\" is not supported; fp8kit's Llama uses SwiGLU (\"silu\")", source,
               printable(act));
  for (const char* key : {"attention_bias", "mlp_bias"}) {
    FP8KIT_CHECK(!boolean_or(config, key, false, source), "{}: \"{}\" is true, but fp8kit's Llama has no biases",
                 source, key);
  }
  // transformers 4 writes "rope_scaling" (null for plain RoPE); transformers 5 writes "rope_parameters"
  // instead, {"rope_type": "default", "rope_theta": ...}.
  for (const char* key : {"rope_scaling", "rope_parameters"}) {
    if (!given(config, key)) continue;
    const json& rope = config[key];
    FP8KIT_CHECK(rope.is_object(), "{}: \"{}\" must be null or an object, not {}", source, key, printable(rope.dump()));
    const std::string type = given(rope, "rope_type") ? string_or(rope, "rope_type", "", source)
                                                      : string_or(rope, "type", "", source);
    FP8KIT_CHECK(type == "default", "{}: {} of type \"{}\" is not supported; fp8kit's Llama uses plain RoPE "
                 "(rope_scaling null or {{\"rope_type\": \"default\"}})", source, key, printable(type));
  }
}

// rope_theta: top level (transformers 4), else in "rope_parameters" (transformers 5), else 10000.
double rope_theta(const json& config, std::string_view source) {
  if (given(config, "rope_theta") || !given(config, "rope_parameters")) {
    return number_or(config, "rope_theta", 10000.0, source);
  }
  return number_or(config["rope_parameters"], "rope_theta", 10000.0, source);
}

LlamaConfig parse_object(const json& config, std::string_view source) {
  FP8KIT_CHECK(config.is_object(), "{}: a config must be a JSON object, not {}", source, config.type_name());
  check_supported(config, source);
  LlamaConfig c;
  c.vocab_size = required_integer(config, "vocab_size", source);
  c.hidden_size = required_integer(config, "hidden_size", source);
  c.intermediate_size = required_integer(config, "intermediate_size", source);
  c.num_hidden_layers = required_integer(config, "num_hidden_layers", source);
  c.num_attention_heads = required_integer(config, "num_attention_heads", source);
  c.num_key_value_heads = integer_or(config, "num_key_value_heads", c.num_attention_heads, source);
  if (given(config, "head_dim")) {
    c.head_dim = integer(config["head_dim"], "head_dim", source);
  } else {
    FP8KIT_CHECK(c.num_attention_heads > 0 && c.hidden_size % c.num_attention_heads == 0,
                 "{}: hidden_size {} is not divisible by num_attention_heads {}; give head_dim or fix the sizes",
                 source, c.hidden_size, c.num_attention_heads);
    c.head_dim = c.hidden_size / c.num_attention_heads;
  }
  c.max_position_embeddings = integer_or(config, "max_position_embeddings", 2048, source);
  c.rms_norm_eps = number_or(config, "rms_norm_eps", 1e-6, source);
  c.rope_theta = rope_theta(config, source);
  c.tie_word_embeddings = boolean_or(config, "tie_word_embeddings", false, source);
  c.bos_token_id = token_id(config, "bos_token_id", source);
  c.eos_token_id = token_id(config, "eos_token_id", source);
  c.torch_dtype = given(config, "torch_dtype") ? string_or(config, "torch_dtype", "", source)
                                               : string_or(config, "dtype", "float32", source);
  validate_llama_config(c, source);
  return c;
}

fs::path config_file(const fs::path& path) {
  std::error_code error;
  return fs::is_directory(path, error) ? path / "config.json" : path;
}

struct Preset {
  std::string_view name;
  int64_t hidden, layers, heads, kv_heads, ffn, max_positions;
  double rope_theta;
  bool tied;
};

constexpr std::array<Preset, 5> kPresets{{
    {"tiny", 64, 2, 4, 2, 192, 256, 10000.0, true},
    {"25m", 512, 7, 8, 4, 1376, 1024, 10000.0, true},
    {"gpt2-small", 768, 12, 12, 12, 2048, 1024, 10000.0, true},
    {"1b", 2048, 16, 32, 8, 8192, 2048, 500000.0, false},
    {"8b", 4096, 32, 32, 8, 14336, 8192, 500000.0, false},  // Llama-3-8B's shapes (with vocab 128256)
}};

int64_t product(const std::vector<int64_t>& shape) {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

}  // namespace

void validate_llama_config(const LlamaConfig& c, std::string_view source) {
  const std::pair<const char*, int64_t> sizes[] = {
      {"vocab_size", c.vocab_size},
      {"hidden_size", c.hidden_size},
      {"intermediate_size", c.intermediate_size},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_attention_heads", c.num_attention_heads},
      {"num_key_value_heads", c.num_key_value_heads},
      {"head_dim", c.head_dim},
      {"max_position_embeddings", c.max_position_embeddings},
  };
  for (const auto& [key, value] : sizes) {
    FP8KIT_CHECK(value > 0, "{}: {} must be positive, not {}", source, key, value);
  }
  FP8KIT_CHECK(c.num_attention_heads % c.num_key_value_heads == 0,
               "{}: num_attention_heads {} is not a multiple of num_key_value_heads {}; each key/value head must "
               "serve the same number of query heads", source, c.num_attention_heads, c.num_key_value_heads);
  FP8KIT_CHECK(c.head_dim % 2 == 0, "{}: head_dim {} must be even (RoPE rotates pairs of dimensions)", source,
               c.head_dim);
  FP8KIT_CHECK(std::isfinite(c.rms_norm_eps) && c.rms_norm_eps > 0, "{}: rms_norm_eps must be positive and finite, "
               "not {}", source, c.rms_norm_eps);
  FP8KIT_CHECK(std::isfinite(c.rope_theta) && c.rope_theta > 0, "{}: rope_theta must be positive and finite, not {}",
               source, c.rope_theta);
  for (const auto& [key, id] : {std::pair{"bos_token_id", c.bos_token_id}, {"eos_token_id", c.eos_token_id}}) {
    FP8KIT_CHECK(id == -1 || (id >= 0 && id < c.vocab_size), "{}: {} {} is outside the vocabulary of {} tokens",
                 source, key, id, c.vocab_size);
  }
  FP8KIT_CHECK(c.torch_dtype == "float32" || c.torch_dtype == "bfloat16" || c.torch_dtype == "float16",
               "{}: torch_dtype \"{}\" is not one of float32, bfloat16, float16", source, printable(c.torch_dtype));
}

LlamaConfig parse_llama_config(std::string_view json_text, std::string_view source) {
  json config;
  try {
    config = json::parse(json_text);
  } catch (const json::exception& e) {
    fail("{} is not valid JSON ({})", source, printable(e.what()));
  }
  return parse_object(config, source);
}

LlamaConfig read_llama_config(const fs::path& path) {
  const fs::path file = config_file(path);
  const io::MappedFile mapped(file);
  return parse_llama_config(
      std::string_view(reinterpret_cast<const char*>(mapped.bytes().data()), mapped.bytes().size()), file.string());
}

std::string llama_config_json(const LlamaConfig& c) {
  const auto id = [](int64_t token) { return token == -1 ? json(nullptr) : json(token); };
  const json config = {
      {"architectures", {"LlamaForCausalLM"}},
      {"attention_bias", false},
      {"attention_dropout", 0.0},
      {"bos_token_id", id(c.bos_token_id)},
      {"eos_token_id", id(c.eos_token_id)},
      {"head_dim", c.head_dim},
      {"hidden_act", "silu"},
      {"hidden_size", c.hidden_size},
      {"initializer_range", 0.02},
      {"intermediate_size", c.intermediate_size},
      {"max_position_embeddings", c.max_position_embeddings},
      {"mlp_bias", false},
      {"model_type", "llama"},
      {"num_attention_heads", c.num_attention_heads},
      {"num_hidden_layers", c.num_hidden_layers},
      {"num_key_value_heads", c.num_key_value_heads},
      {"pretraining_tp", 1},
      {"rms_norm_eps", c.rms_norm_eps},
      {"rope_scaling", nullptr},
      {"rope_theta", c.rope_theta},
      {"tie_word_embeddings", c.tie_word_embeddings},
      {"torch_dtype", c.torch_dtype},
      {"use_cache", true},
      {"vocab_size", c.vocab_size},
  };
  return config.dump(2, ' ', /*ensure_ascii=*/true) + "\n";
}

void write_llama_config(const fs::path& path, const LlamaConfig& config) {
  const bool is_file = path.extension() == ".json";
  if (!is_file) {
    std::error_code error;
    fs::create_directories(path, error);
    FP8KIT_CHECK(!error, "cannot create the model directory {}: {}", path.string(), error.message());
  }
  const fs::path file = is_file ? path : path / "config.json";
  validate_llama_config(config, file.string());
  const std::string text = llama_config_json(config);
  io::write_file_atomically(file, std::as_bytes(std::span(text.data(), text.size())));
}

LlamaConfig llama_preset(std::string_view name, int64_t vocab_size) {
  for (const Preset& p : kPresets) {
    if (p.name != name) continue;
    LlamaConfig c;
    c.vocab_size = vocab_size;
    c.hidden_size = p.hidden;
    c.intermediate_size = p.ffn;
    c.num_hidden_layers = p.layers;
    c.num_attention_heads = p.heads;
    c.num_key_value_heads = p.kv_heads;
    c.head_dim = p.hidden / p.heads;
    c.max_position_embeddings = p.max_positions;
    c.rms_norm_eps = 1e-5;
    c.rope_theta = p.rope_theta;
    c.tie_word_embeddings = p.tied;
    validate_llama_config(c, fmt::format("Llama preset \"{}\"", name));
    return c;
  }
  fail("unknown Llama preset \"{}\" (known: {})", name, fmt::join(llama_preset_names(), ", "));
}

std::vector<std::string_view> llama_preset_names() {
  std::vector<std::string_view> names;
  for (const Preset& p : kPresets) names.push_back(p.name);
  return names;
}

int64_t parameter_count(const LlamaConfig& config) {
  int64_t count = 0;
  for (const WeightShape& weight : llama_weights(config)) count += product(weight.shape);
  return count;
}

double flops_per_token(const LlamaConfig& c, int64_t seq) {
  const int64_t untied_embedding = c.tie_word_embeddings ? 0 : c.vocab_size * c.hidden_size;
  const auto multiplied = static_cast<double>(parameter_count(c) - untied_embedding);
  const auto attention = static_cast<double>(c.num_hidden_layers * c.num_attention_heads * c.head_dim);
  return 6.0 * multiplied + 12.0 * attention * static_cast<double>(seq);
}

std::vector<WeightShape> llama_layer_weights(const LlamaConfig& c, int64_t layer) {
  const std::string prefix = fmt::format("model.layers.{}.", layer);
  const int64_t q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  const int64_t hidden = c.hidden_size, ffn = c.intermediate_size;
  return {
      {prefix + "self_attn.q_proj.weight", {q, hidden}},
      {prefix + "self_attn.k_proj.weight", {kv, hidden}},
      {prefix + "self_attn.v_proj.weight", {kv, hidden}},
      {prefix + "self_attn.o_proj.weight", {hidden, q}},
      {prefix + "mlp.gate_proj.weight", {ffn, hidden}},
      {prefix + "mlp.up_proj.weight", {ffn, hidden}},
      {prefix + "mlp.down_proj.weight", {hidden, ffn}},
      {prefix + "input_layernorm.weight", {hidden}},
      {prefix + "post_attention_layernorm.weight", {hidden}},
  };
}

std::vector<WeightShape> llama_weights(const LlamaConfig& c) {
  std::vector<WeightShape> weights{{"model.embed_tokens.weight", {c.vocab_size, c.hidden_size}}};
  for (int64_t layer = 0; layer < c.num_hidden_layers; ++layer) {
    for (WeightShape& weight : llama_layer_weights(c, layer)) weights.push_back(std::move(weight));
  }
  weights.push_back({"model.norm.weight", {c.hidden_size}});
  if (!c.tie_word_embeddings) weights.push_back({"lm_head.weight", {c.vocab_size, c.hidden_size}});
  return weights;
}

}  // namespace fp8kit::models
