// The Llama model as a Hugging Face model directory: config.json plus the weights under their HF
// names (model.safetensors, or shards with model.safetensors.index.json), so fp8kit's checkpoints
// load in transformers and HF Llama checkpoints load in fp8kit.
#pragma once

#include "io/hf_model.h"
#include "models/llama.h"
#include "text/bpe_tokenizer.h"

#include <cstdint>
#include <filesystem>

namespace fp8kit::models {

// Writes config.json and the weights (BF16 unless the config's torch_dtype is "float32") into `dir`,
// atomically file by file (io::write_hf_model_weights), in transformers' state-dict order
// (llama_weights), so that max_shard_bytes cuts the shards transformers' save_pretrained would.
void save_pretrained(Llama& model, const std::filesystem::path& dir,
                     uint64_t max_shard_bytes = io::kHfDefaultMaxShardBytes);

// Reads `dir`'s config.json and weights (F32, BF16 or F16) into a new model on `device`, in fp32
// precision. Every weight must be there with its shape (a one-line error names the tensor and the
// file); a tensor the architecture does not have is an error too (the config does not match the
// weights), but for a tied model's lm_head.weight equal to the embedding, which some files keep.
Llama load_pretrained(const std::filesystem::path& dir, Device device = Device::Cpu);

// Writes `dir`/tokenizer_config.json for the tokenizer.json beside a model of `config`, so that
// transformers' AutoTokenizer knows its special tokens: the fast tokenizer class, bos_token and
// eos_token (the config's ids; null when -1), model_max_length = max_position_embeddings, and no
// clean-up of spaces on decode (byte-level BPE decodes to the exact text). Atomic.
void write_tokenizer_config(const std::filesystem::path& dir, const text::BpeTokenizer& tokenizer,
                            const LlamaConfig& config);

}  // namespace fp8kit::models
