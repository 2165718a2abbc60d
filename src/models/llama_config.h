// Llama-architecture language models as Hugging Face describes them: config.json (read, validated,
// written as transformers writes it), fp8kit's shipped size presets, parameter and FLOP counts, and
// the HF names and shapes of every weight.
#pragma once

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace fp8kit::models {

// The fields of transformers' LlamaConfig that fp8kit's Llama uses. Rotary embeddings are plain
// (rope_scaling null), the activation SiLU, the projections bias-free.
struct LlamaConfig {
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;  // the SwiGLU MLP's width
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;  // grouped-query attention: each serves heads / kv_heads query heads
  int64_t head_dim = 0;             // hidden_size / num_attention_heads unless config.json gives it
  int64_t max_position_embeddings = 0;
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  bool tie_word_embeddings = false;  // lm_head shares model.embed_tokens.weight (and is not saved)
  int64_t bos_token_id = -1;         // -1: none
  int64_t eos_token_id = -1;         // -1: none; of a list (Llama 3 instruct models), the first
  std::string torch_dtype = "bfloat16";  // the dtype of the saved weights: "float32", "bfloat16" or "float16"

  bool operator==(const LlamaConfig&) const = default;
};

// Throws fp8kit::Error with one line, "SOURCE: what is wrong and what to do", unless every size is
// positive, the query heads are a multiple of the key/value heads, head_dim is even (RoPE rotates
// pairs), eps and theta are positive and finite, the token ids are -1 or inside the vocabulary and
// torch_dtype is one of the three above.
void validate_llama_config(const LlamaConfig& config, std::string_view source = "Llama config");

// Parses config.json text (`source` names it in errors). model_type must be "llama", hidden_act
// "silu" (the default), attention_bias and mlp_bias false, rope_scaling null or of type "default";
// anything else is an error saying what is supported. Absent keys take transformers' defaults
// (num_key_value_heads = num_attention_heads, max_position_embeddings 2048, rms_norm_eps 1e-6,
// rope_theta 10000, untied); rope_theta and the RoPE type are read from "rope_parameters" too, where
// transformers 5 writes them; head_dim, when absent or null, is hidden_size / num_attention_heads,
// which must divide. torch_dtype is read from "torch_dtype" or (newer transformers) "dtype", and is
// "float32" when neither is given. Keys fp8kit does not use are ignored.
LlamaConfig parse_llama_config(std::string_view json_text, std::string_view source = "config.json");
// Reads `path`: a config.json, or a model directory holding one.
LlamaConfig read_llama_config(const std::filesystem::path& path);

// config.json as transformers writes it (json.dumps(indent=2, sort_keys=True) + "\n") for
// LlamaForCausalLM, without "transformers_version"; a token id of -1 is written as null.
std::string llama_config_json(const LlamaConfig& config);
// Validates, then writes llama_config_json atomically to `path`: a file when it ends in ".json",
// else a directory (created if missing) that gets a config.json.
void write_llama_config(const std::filesystem::path& path, const LlamaConfig& config);

// A shipped size, by name, for a tokenizer of `vocab_size` tokens (all rope_theta 10000 but "1b"'s
// 500000, rms_norm_eps 1e-5, torch_dtype bfloat16, token ids -1):
//   "tiny":       hidden 64,  2 layers,  4 heads,  2 kv heads, FFN 192,  max pos 256,  tied
//   "25m":        hidden 512, 7 layers,  8 heads,  4 kv heads, FFN 1376, max pos 1024, tied
//                 (24,501,760 parameters with vocab 8192)
//   "gpt2-small": hidden 768, 12 layers, 12 heads, 12 kv heads, FFN 2048, max pos 1024, tied
//   "1b":         hidden 2048, 16 layers, 32 heads, 8 kv heads, FFN 8192, max pos 2048, untied
//   "8b":         hidden 4096, 32 layers, 32 heads, 8 kv heads, FFN 14336, max pos 8192, untied
//                 (Llama-3-8B's shapes with vocab 128256: 8,030,261,248 parameters; the inference benchmark's)
// An unknown name is an error listing the known ones.
LlamaConfig llama_preset(std::string_view name, int64_t vocab_size);
std::vector<std::string_view> llama_preset_names();

// Every weight's element count; lm_head counted only when untied (as the saved files hold it).
int64_t parameter_count(const LlamaConfig& config);

// Training FLOPs per token at sequence length `seq`, PaLM's MFU convention (Chowdhery et al. 2022,
// appendix B): 6 N + 12 L H Q T, with N = the weights a token's forward pass multiplies (every
// parameter but the input embedding table, the LM head counted even when tied: parameter_count,
// less vocab_size * hidden_size when untied), L layers, H query heads of Q = head_dim, T = seq.
// 6 N is the forward and backward matmuls (2 + 4 FLOPs per weight); 12 L H Q T the attention
// score and value matmuls, forward and backward, without halving for the causal mask.
double flops_per_token(const LlamaConfig& config, int64_t seq);

struct WeightShape {
  std::string name;  // the HF name, e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> shape;
};

// Layer `layer`'s weights in HF (state-dict) order: self_attn.{q,k,v,o}_proj ([heads * head_dim,
// hidden], [kv_heads * head_dim, hidden] twice, [hidden, heads * head_dim]), mlp.{gate,up,down}_proj
// ([ffn, hidden] twice, [hidden, ffn]), input_layernorm and post_attention_layernorm ([hidden]).
std::vector<WeightShape> llama_layer_weights(const LlamaConfig& config, int64_t layer);
// The whole model in HF order: model.embed_tokens.weight [vocab, hidden], every layer,
// model.norm.weight [hidden], and lm_head.weight [vocab, hidden] unless tied.
std::vector<WeightShape> llama_weights(const LlamaConfig& config);

}  // namespace fp8kit::models
