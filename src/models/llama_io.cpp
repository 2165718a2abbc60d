// Saving and loading the Llama model as an HF model directory.
#include "models/llama_io.h"

#include "base/error.h"
#include "text/byte_level.h"

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

namespace fp8kit::models {

void save_pretrained(Llama& model, const std::filesystem::path& dir, uint64_t max_shard_bytes) {
  const bool bf16 = model.config().torch_dtype != "float32";
  LlamaConfig config = model.config();
  config.torch_dtype = bf16 ? "bfloat16" : "float32";
  model.context().synchronize();
  // In transformers' state-dict order (llama_weights), which decides the shards as save_pretrained's do.
  std::map<std::string, nn::Parameter*, std::less<>> by_name;
  for (nn::Parameter* p : model.parameters()) by_name.emplace(p->name, p);
  std::vector<Tensor> host;  // the weights' host copies, alive while written
  std::vector<std::vector<uint16_t>> bits;
  std::vector<io::TensorView> views;
  for (const WeightShape& weight : llama_weights(config)) {
    const auto it = by_name.find(weight.name);
    FP8KIT_CHECK(it != by_name.end(), "the model has no parameter {}", weight.name);
    nn::Parameter* p = it->second;
    host.push_back(p->value.to(Device::Cpu));
    if (bf16) {
      bits.push_back(io::f32_to_bf16(host.back().span<float>()));
      views.push_back({p->name, io::Dtype::BF16, p->shape, std::as_bytes(std::span(bits.back()))});
    } else {
      views.push_back({p->name, io::Dtype::F32, p->shape, std::as_bytes(host.back().span<float>())});
    }
  }
  std::filesystem::create_directories(dir);
  io::write_hf_model_weights(dir, views, max_shard_bytes);
  write_llama_config(dir, config);  // last: a directory with a config.json is complete
}

Llama load_pretrained(const std::filesystem::path& dir, Device device) {
  const LlamaConfig config = read_llama_config(dir);
  const io::HfWeights weights = io::open_hf_weights(dir);
  Llama model(config, 0, device);
  std::set<std::string, std::less<>> used;
  std::vector<float> values;
  for (nn::Parameter* p : model.parameters()) {
    values.resize(static_cast<size_t>(p->numel()));
    io::tensor_to_f32(weights.at(p->name, p->shape), values);
    p->value.copy_from_host(values.data());
    used.insert(p->name);
  }
  for (const std::string& name : weights.names()) {
    if (used.contains(name) || name.ends_with(".rotary_emb.inv_freq")) continue;  // older HF files carry inv_freq
    if (name == "lm_head.weight" && config.tie_word_embeddings) {
      // Some files keep the tied head's copy (transformers loads them, using the embedding): harmless
      // when it is the embedding, a mismatched config otherwise.
      const io::TensorView& embedding = weights.at("model.embed_tokens.weight");
      const io::TensorView& head = weights.at(name);
      FP8KIT_CHECK(head.shape == embedding.shape && io::tensor_to_f32(head) == io::tensor_to_f32(embedding),
                   "lm_head.weight in {} differs from model.embed_tokens.weight, but {}/config.json ties them "
                   "(tie_word_embeddings true): set it to false to use both", weights.file_of(name), dir.string());
      continue;
    }
    fail("{} in {} is not a weight of the Llama that {}/config.json describes ({} layers, {}tied embeddings): the "
         "config does not match the weights",
         name, weights.file_of(name), dir.string(), config.num_hidden_layers, config.tie_word_embeddings ? "" : "un");
  }
  return model;
}

void write_tokenizer_config(const std::filesystem::path& dir, const text::BpeTokenizer& tokenizer,
                            const LlamaConfig& config) {
  // A token as tokenizer.json spells it: an added token's content, else its byte-level string.
  const auto token = [&](int64_t id) -> nlohmann::json {
    if (id < 0) return nullptr;
    FP8KIT_CHECK(id < tokenizer.vocab_size(), "token id {} of the config is outside the tokenizer's {} tokens", id,
                 tokenizer.vocab_size());
    const auto& added = tokenizer.model().added_tokens;
    const bool is_added = std::ranges::any_of(added, [&](const text::BpeAddedToken& t) { return t.id == id; });
    const std::string& bytes = tokenizer.token_bytes(static_cast<int32_t>(id));
    return is_added ? bytes : text::to_byte_level(bytes);
  };
  const nlohmann::json tokenizer_config = {
      {"tokenizer_class", "PreTrainedTokenizerFast"},
      {"bos_token", token(config.bos_token_id)},
      {"eos_token", token(config.eos_token_id)},
      {"model_max_length", config.max_position_embeddings},
      {"clean_up_tokenization_spaces", false},
  };
  const std::string text = tokenizer_config.dump(2, ' ', /*ensure_ascii=*/true) + "\n";
  io::write_file_atomically(dir / "tokenizer_config.json", std::as_bytes(std::span(text.data(), text.size())));
}

}  // namespace fp8kit::models
