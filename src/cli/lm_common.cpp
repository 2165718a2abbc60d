// The `fp8kit lm` subcommands' shared text handling.
#include "cli/lm_common.h"

#include "base/error.h"
#include "cli/options.h"
#include "data/imdb.h"
#include "data/token_windows.h"
#include "models/llama_config.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iterator>
#include <optional>

namespace fp8kit::cli {

namespace fs = std::filesystem;

Corpus imdb_corpus(const std::string& data, int64_t limit) {
  const fs::path path = data::find_imdb(data.empty() ? std::nullopt : std::optional<fs::path>(data));
  data::ImdbSplits splits = data::load_imdb(path, {.lowercase = false, .validation_fraction = 0.0});
  auto pick = [limit](std::vector<std::string>& texts) {
    if (limit <= 0 || limit >= static_cast<int64_t>(texts.size())) return std::move(texts);
    std::vector<std::string> kept;
    for (int64_t i = 0; i < limit; ++i) kept.push_back(std::move(texts[i * texts.size() / limit]));
    return kept;
  };
  return {pick(splits.train.texts), pick(splits.test.texts)};
}

bool is_config_path(const std::string& config) {
  std::error_code error;
  if (!fs::exists(config, error)) return false;
  if (!fs::is_directory(config, error) || fs::exists(fs::path(config) / "config.json", error)) return true;
  const std::vector<std::string_view> presets = models::llama_preset_names();
  return std::find(presets.begin(), presets.end(), config) == presets.end();  // a folder: its config.json is missing
}

std::vector<int32_t> token_stream(const text::BpeTokenizer& tokenizer, const std::vector<std::string>& texts) {
  const std::optional<int32_t> eos = tokenizer.eos_id();
  FP8KIT_CHECK(eos.has_value(), "the tokenizer has no <|endoftext|> token to separate documents with");
  std::vector<std::vector<int32_t>> documents = tokenizer.encode_batch(texts);
  const std::span<const int32_t> bos = tokenizer.bos_ids();
  for (std::vector<int32_t>& ids : documents) ids.insert(ids.begin(), bos.begin(), bos.end());
  return data::join_documents(documents, *eos);
}

std::string read_text(const fs::path& path, const std::string& option) {
  std::ifstream in(path, std::ios::binary);
  FP8KIT_CHECK(in.good(), "cannot read {} {}: check the path", option, path.string());
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void add_engine_options(CLI::App& app, EngineArgs& a) {
  app.add_option("--device", a.device, "cpu or cuda")->capture_default_str();
  app.add_option("--kv-cache", a.kv_cache, "the KV cache's dtype: bf16 or fp8 (E4M3, with the model's k/v scales)")
      ->capture_default_str()
      ->check(CLI::IsMember({"bf16", "fp8"}));
  app.add_option("--activations", a.activations,
                 "FP8 models' activation scales: static (calibrated, packed), dynamic (per token), warmup (per "
                 "token while --warm-up forwards record amaxes, then frozen), auto (static when packed, else dynamic)")
      ->capture_default_str()
      ->check(CLI::IsMember({"auto", "static", "dynamic", "warmup"}));
  app.add_option("--warm-up", a.warm_up, "forwards before warm-up scales freeze")
      ->capture_default_str()
      ->check(whole_number(1, 1'000'000));
}

infer::EngineOptions engine_options(const EngineArgs& a, int64_t max_batch, int64_t max_seq) {
  infer::EngineOptions o;
  o.max_batch = max_batch;
  o.max_seq = max_seq;
  o.kv_cache = a.kv_cache == "fp8" ? DType::E4M3 : DType::Bf16;
  if (a.activations == "static") o.activations = infer::ActivationScaling::Static;
  if (a.activations == "dynamic") o.activations = infer::ActivationScaling::Dynamic;
  if (a.activations == "warmup") o.activations = infer::ActivationScaling::WarmUp;
  o.warm_up_passes = a.warm_up;
  return o;
}

infer::LlamaEngine open_engine(const std::filesystem::path& dir, Device device, const infer::EngineOptions& options) {
  infer::LlamaEngine engine = infer::LlamaEngine::open(dir, device, options);
  if (engine.default_kv_scales())
    fmt::print(stderr,
               "note: {} has no calibrated k/v scales: the FP8 KV cache stores keys and values at scale {} (calibrate, "
               "then pack with --kv-cache fp8, for calibrated ones)\n",
               dir.string(), options.default_kv_scale);
  return engine;
}

}  // namespace fp8kit::cli
