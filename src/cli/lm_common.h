// What the `fp8kit lm` subcommands share: the IMDB reviews as LM text, token streams as training saw
// them, and reading a text file.
#pragma once

#include "infer/llama_engine.h"
#include "text/bpe_tokenizer.h"

#include <CLI/CLI.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

namespace fp8kit::cli {

inline constexpr const char* kTokenizerFile = "tokenizer.json";

struct Corpus {
  std::vector<std::string> train, validation;
};

// The reviews as raw text (no lowercasing): the train folder for training, the test folder for
// validation; with limit, N evenly spaced reviews of each. data: a tarball or folder, or empty (searched).
Corpus imdb_corpus(const std::string& data, int64_t limit);

// Each document as the tokenizer's Hugging Face counterpart encodes it (after its BOS, where its
// template puts one: Llama 3), followed by the end-of-text token.
std::vector<int32_t> token_stream(const text::BpeTokenizer& tokenizer, const std::vector<std::string>& texts);

// Whether --config names a config.json (a file, or a folder holding one) rather than a preset: a
// folder that happens to be called "tiny" in the working directory is not a config.
bool is_config_path(const std::string& config);

// A file's bytes as they are ("cannot read OPTION PATH" when it cannot be read).
std::string read_text(const std::filesystem::path& path, const std::string& option = "--text");

// How `lm eval --runtime`, `lm generate`, `lm agreement` and `lm bench` run the inference engine.
struct EngineArgs {
  std::string device = "cpu";
  std::string kv_cache = "bf16";     // bf16 | fp8
  std::string activations = "auto";  // auto | static | dynamic | warmup
  int warm_up = 8;
};
void add_engine_options(CLI::App& app, EngineArgs& a);
// The engine's options from the arguments (the device is parsed, and CUDA required, by the caller).
infer::EngineOptions engine_options(const EngineArgs& a, int64_t max_batch, int64_t max_seq);
// infer::LlamaEngine::open, with a note on stderr when an FP8 KV cache runs at the default scale for
// want of the model's calibrated k/v scales.
infer::LlamaEngine open_engine(const std::filesystem::path& dir, Device device, const infer::EngineOptions& options);

// The `lm` subcommands of other files: lm_pack.cpp's and lm_infer.cpp's.
void add_lm_pack_command(CLI::App& lm);
void add_lm_inference_commands(CLI::App& lm);

}  // namespace fp8kit::cli
