// The packer: one pass over the source's weights in HF order, projections quantized with numerics'
// quantize_blocks, everything written through io's atomic writers, config.json last.
#include "quant/pack.h"

#include "base/error.h"
#include "models/llama_config.h"
#include "numerics/format.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <deque>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

namespace fp8kit::quant {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kTokenizerFiles[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                           "generation_config.json"};

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  FP8KIT_CHECK(in.good(), "cannot read {}", path.string());
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

void write_text(const fs::path& path, std::string_view text) {
  io::write_file_atomically(path, std::as_bytes(std::span(text.data(), text.size())));
}

// JSON text as Python's json.dumps(indent=2) lays it out; bytes that are not UTF-8 (a path, a
// calibration's source) become U+FFFD instead of an exception.
std::string json_text(const json& value, int indent = 2) {
  return value.dump(indent, ' ', false, json::error_handler_t::replace) + (indent >= 0 ? "\n" : "");
}

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string_view strategy_name(Granularity g) {
  switch (g) {
    case Granularity::PerTensor: return "tensor";
    case Granularity::PerRow: return "channel";
    case Granularity::PerGroup: return "group";
    default: return "block";
  }
}

void check_options(const PackOptions& o, const CalibrationStats* calibration) {
  FP8KIT_CHECK(o.weights == Granularity::PerTensor || o.weights == Granularity::PerRow ||
                   o.weights == Granularity::PerGroup || o.weights == Granularity::Block128x128,
               "weights are packed per tensor, per channel, per group or in 128x128 blocks, not {}", name(o.weights));
  FP8KIT_CHECK(o.weights != Granularity::PerGroup || o.group_size == 32 || o.group_size == 64 || o.group_size == 128,
               "a weight group is 32, 64 or 128 elements, not {}", o.group_size);
  FP8KIT_CHECK(o.format != PackFormat::Vllm || o.weights == Granularity::PerTensor ||
                   o.weights == Granularity::Block128x128,
               "vLLM's fp8 format has per-tensor or 128x128 block weight scales only; pack per channel or per group "
               "in the compressed-tensors format");
  FP8KIT_CHECK(!o.static_activations || o.weights != Granularity::Block128x128,
               "block-scaled weights take dynamic activations (per token, in groups of 128); drop static activations");
  FP8KIT_CHECK(calibration != nullptr || (!o.static_activations && !o.fp8_kv_cache),
               "static activation scales and FP8 KV cache scales come from calibration statistics; give a calibration "
               "file");
  FP8KIT_CHECK(o.calibrated.format == Fp8Format::E4M3, "activations and the KV cache are packed as E4M3");
}

const ActivationStats& stats_for(const CalibrationStats& calibration, const std::string& key) {
  const auto it = calibration.activations.find(key);
  FP8KIT_CHECK(it != calibration.activations.end(),
               "the calibration statistics have no \"{}\"; calibrate the same model again", key);
  return it->second;
}

// Owns the bytes behind the views handed to the writer (deques: growing them moves no element).
struct Buffers {
  std::deque<std::vector<uint8_t>> bytes;
  std::deque<std::vector<float>> floats;
  std::deque<std::vector<uint16_t>> bf16;

  io::TensorView f32(std::string name, std::vector<int64_t> shape, std::vector<float> values) {
    const auto& v = floats.emplace_back(std::move(values));
    return {std::move(name), io::Dtype::F32, std::move(shape), std::as_bytes(std::span(v))};
  }
  // The tensor as BF16: its own bytes when it is BF16, else rounded from its float values.
  io::TensorView as_bf16(const io::TensorView& t) {
    if (t.dtype == io::Dtype::BF16) return t;
    const auto& v = bf16.emplace_back(io::f32_to_bf16(io::tensor_to_f32(t)));
    return {t.name, io::Dtype::BF16, t.shape, std::as_bytes(std::span(v))};
  }
};

// The shape that the checkpoint format gives a per-tensor scale: compressed-tensors writes [1], vLLM's
// native format (AutoFP8) a scalar.
std::vector<int64_t> scalar_shape(PackFormat format) {
  return format == PackFormat::Vllm ? std::vector<int64_t>{} : std::vector<int64_t>{1};
}

struct Packer {
  const PackOptions& options;
  const CalibrationStats* calibration;
  const models::LlamaConfig& config;
  Buffers buffers;
  std::vector<io::TensorView> views, master;
  std::map<std::string, json> entries;  // the seed's metadata per exported tensor
  PackReport report;

  // The calibrated input of projection `module`: its amax and scale_inv, when the statistics have it.
  std::optional<std::pair<float, float>> input_of(const std::string& module) {
    if (calibration == nullptr) return std::nullopt;
    if (!options.static_activations && !calibration->activations.contains(module)) return std::nullopt;
    const ActivationStats& stats = stats_for(*calibration, module);
    return std::pair{calibrated_amax(stats, options.calibrated), calibrated_scale_inv(stats, options.calibrated)};
  }

  void projection(const io::TensorView& w) {
    const std::string module = w.name.substr(0, w.name.size() - std::string_view(".weight").size());
    const size_t rows = static_cast<size_t>(w.shape[0]), cols = static_cast<size_t>(w.shape[1]);
    const BlockShape block = block_shape(options.weights, rows, cols, static_cast<size_t>(options.group_size));
    const int64_t scale_rows = cdiv(static_cast<int64_t>(rows), static_cast<int64_t>(block.rows));
    const int64_t scale_cols = cdiv(static_cast<int64_t>(cols), static_cast<int64_t>(block.cols));
    const std::vector<float> x = io::tensor_to_f32(w);
    auto& codes = buffers.bytes.emplace_back(rows * cols);
    std::vector<float> scale_inv(static_cast<size_t>(scale_rows * scale_cols)), amax(scale_inv.size());
    quantize_blocks(x, rows, cols, Fp8Format::E4M3, block, {}, codes, scale_inv, amax);
    const float weight_amax = *std::ranges::max_element(amax);
    if (options.master_copy) master.push_back(buffers.as_bf16(w));

    const bool vllm_blocks = options.format == PackFormat::Vllm && options.weights == Granularity::Block128x128;
    const std::string scale_name = module + (vllm_blocks ? ".weight_scale_inv" : ".weight_scale");
    std::vector<int64_t> scale_shape{scale_rows, scale_cols};
    if (options.weights == Granularity::PerTensor) scale_shape = scalar_shape(options.format);
    json entry = {{"format", "E4M3"},
                  {"layout", "row-major [out, in]"},
                  {"shape", w.shape},
                  {"granularity", strategy_name(options.weights)},
                  {"scale_inv", scale_name},
                  {"scale_inv_shape", scale_shape},
                  {"amax_history_seed", weight_amax}};
    if (options.weights == Granularity::PerGroup) entry["group_size"] = options.group_size;
    if (options.weights == Granularity::Block128x128) entry["block"] = {128, 128};
    if (options.weights == Granularity::PerTensor) entry["scale_inv_value"] = scale_inv[0];

    views.push_back({w.name, io::Dtype::F8_E4M3, w.shape, std::as_bytes(std::span(codes))});
    views.push_back(buffers.f32(scale_name, scale_shape, std::move(scale_inv)));
    uint64_t packed = codes.size() + views.back().data.size();
    json input = {{"dynamic", !options.static_activations}};
    if (const auto calibrated = input_of(module)) {
      input["amax_history_seed"] = calibrated->first;
      if (options.static_activations) {
        const std::string name = module + ".input_scale";
        views.push_back(buffers.f32(name, scalar_shape(options.format), {calibrated->second}));
        packed += views.back().data.size();
        input["scale_inv"] = name;
        input["scale_inv_value"] = calibrated->second;
      }
    }
    entry["input"] = std::move(input);
    entries[w.name] = std::move(entry);
    report.projection_bf16_bytes += 2 * rows * cols;
    report.projection_packed_bytes += packed;
    ++report.quantized;
  }

  void kv_scales(int64_t layer) {
    const std::string prefix = "model.layers." + std::to_string(layer) + ".self_attn.";
    for (const char* kv : {"k", "v"}) {
      const ActivationStats& stats = stats_for(*calibration, prefix + kv + "_cache");
      const int64_t kv_heads = config.num_key_value_heads;
      FP8KIT_CHECK(static_cast<int64_t>(stats.channel_amax.size()) == kv_heads * config.head_dim,
                   "the calibration's \"{}{}_cache\" has {} channels but the model's KV heads have {}", prefix, kv,
                   stats.channel_amax.size(), kv_heads * config.head_dim);
      const bool per_head = options.kv_scales == KvScaleGranularity::PerHead;
      const std::vector<float> amax = per_head ? calibrated_head_amax(stats, config.head_dim, options.calibrated)
                                               : std::vector<float>{calibrated_amax(stats, options.calibrated)};
      std::vector<float> scale_inv;
      for (const float a : amax) scale_inv.push_back(scale_inv_from_amax(a, Fp8Format::E4M3, options.calibrated.margin));
      const std::string name = prefix + kv + "_scale";
      entries[name] = {{"format", "E4M3"},
                       {"layout", per_head ? "[kv_heads], one per KV head" : "per tensor"},
                       {"granularity", per_head ? "head" : "tensor"},
                       {"scale_inv", name},
                       {"scale_inv_value", scale_inv},
                       {"amax_history_seed", amax}};
      std::vector<int64_t> shape = per_head ? std::vector<int64_t>{kv_heads} : scalar_shape(options.format);
      views.push_back(buffers.f32(name, std::move(shape), std::move(scale_inv)));
    }
  }
};

json quantization_args(std::string_view strategy, bool dynamic, std::optional<int64_t> group_size = std::nullopt,
                       bool block = false) {
  json args = {{"num_bits", 8},         {"type", "float"},   {"symmetric", true},   {"strategy", strategy},
               {"dynamic", dynamic},    {"group_size", nullptr}, {"block_structure", nullptr}, {"actorder", nullptr}};
  if (group_size) args["group_size"] = *group_size;
  if (block) args["block_structure"] = {128, 128};
  return args;
}

json quantization_config(const PackOptions& o) {
  const bool block = o.weights == Granularity::Block128x128;
  if (o.format == PackFormat::Vllm) {
    json config = {{"quant_method", "fp8"},
                   {"fmt", "e4m3"},
                   {"activation_scheme", o.static_activations ? "static" : "dynamic"},
                   {"ignored_layers", {"lm_head"}}};
    if (block) config["weight_block_size"] = {128, 128};
    return config;
  }
  json weights = quantization_args(strategy_name(o.weights), false,
                                   o.weights == Granularity::PerGroup ? std::optional(o.group_size) : std::nullopt,
                                   block);
  json inputs = o.static_activations ? quantization_args("tensor", false)
                : block              ? quantization_args("group", true, 128)
                                     : quantization_args("token", true);
  json kv = nullptr;
  if (o.fp8_kv_cache) kv = quantization_args(o.kv_scales == KvScaleGranularity::PerHead ? "attn_head" : "tensor", false);
  return {{"quant_method", "compressed-tensors"},
          {"format", "float-quantized"},
          {"quantization_status", "compressed"},
          {"config_groups",
           {{"group_0",
             {{"targets", {"Linear"}},
              {"weights", std::move(weights)},
              {"input_activations", std::move(inputs)},
              {"output_activations", nullptr},
              {"format", "float-quantized"}}}}},
          {"ignore", {"lm_head"}},
          {"kv_cache_scheme", std::move(kv)}};
}

}  // namespace

bool is_fp8_projection(std::string_view weight_name) {
  if (!weight_name.starts_with("model.layers.") || !weight_name.ends_with("_proj.weight")) return false;
  for (const char* p : {".self_attn.q_proj.weight", ".self_attn.k_proj.weight", ".self_attn.v_proj.weight",
                        ".self_attn.o_proj.weight", ".mlp.gate_proj.weight", ".mlp.up_proj.weight", ".mlp.down_proj.weight"}) {
    if (weight_name.ends_with(p)) return true;
  }
  return false;
}

PackReport pack_llama(const fs::path& model_dir, const fs::path& out_dir, const PackOptions& options,
                      const CalibrationStats* calibration) {
  check_options(options, calibration);
  std::error_code error;
  const fs::path config_path = model_dir / "config.json";
  json source_config;
  try {
    source_config = json::parse(read_text(config_path));
  } catch (const json::exception& e) {
    fail("{} is not valid JSON ({})", config_path.string(), e.what());
  }
  FP8KIT_CHECK(!source_config.contains("quantization_config"),
               "{} is already quantized (its config.json has a quantization_config); pack a bf16 or f32 model",
               model_dir.string());
  const models::LlamaConfig config = models::read_llama_config(model_dir);
  FP8KIT_CHECK(!fs::exists(out_dir, error) || !fs::equivalent(model_dir, out_dir, error),
               "--out {} is the source model's directory; packing never overwrites its source", out_dir.string());
  if (fs::exists(out_dir / "config.json", error)) {
    json existing;
    try {
      existing = json::parse(read_text(out_dir / "config.json"));
    } catch (const json::exception&) {
    }
    FP8KIT_CHECK(existing.is_object() && existing.contains("quantization_config"),
                 "{} holds a model that is not a packed one; choose another output directory", out_dir.string());
  }
  const io::HfWeights weights = io::open_hf_weights(model_dir);

  Packer packer{options, calibration, config, {}, {}, {}, {}, {}};
  std::set<std::string, std::less<>> used;
  int64_t layer = 0;
  const std::vector<models::WeightShape> shapes = models::llama_weights(config);
  for (size_t i = 0; i < shapes.size(); ++i) {
    const io::TensorView& w = weights.at(shapes[i].name, shapes[i].shape);
    used.insert(w.name);
    packer.report.bf16_bytes += 2 * (w.data.size() / io::dtype_size(w.dtype));
    if (is_fp8_projection(w.name)) {
      packer.projection(w);
    } else {
      packer.views.push_back(packer.buffers.as_bf16(w));
    }
    // After a layer's last weight (its post_attention_layernorm), its KV cache scales.
    const std::string layer_end = "model.layers." + std::to_string(layer) + ".post_attention_layernorm.weight";
    if (w.name == layer_end) {
      if (options.fp8_kv_cache) packer.kv_scales(layer);
      ++layer;
    }
  }
  for (const std::string& name : weights.names()) {
    const bool tied_head = name == "lm_head.weight" && config.tie_word_embeddings;
    FP8KIT_CHECK(used.contains(name) || tied_head || name.ends_with(".rotary_emb.inv_freq"),
                 "{} in {} is not a weight of the Llama that {}/config.json describes: the config does not match the "
                 "weights",
                 io::printable(name), weights.file_of(name), model_dir.string());
  }
  for (const io::TensorView& v : packer.views) packer.report.packed_bytes += v.data.size();

  fs::create_directories(out_dir, error);
  FP8KIT_CHECK(!error, "cannot create {}: {}", out_dir.string(), error.message());
  fs::remove(out_dir / "config.json", error);  // the directory is incomplete until config.json is back
  const std::map<std::string, json>& entries = packer.entries;
  const auto shard_metadata = [&](std::span<const io::TensorView> shard) {
    io::Metadata metadata{{"fp8kit.format", std::string(kPackedFormat)}, {"fp8kit.version", "1"}};
    for (const io::TensorView& t : shard) {
      if (const auto it = entries.find(t.name); it != entries.end()) metadata[t.name] = json_text(it->second, -1);
    }
    return metadata;
  };
  for (const std::string& file : io::write_hf_model_weights(out_dir, packer.views, options.max_shard_bytes, shard_metadata)) {
    packer.report.files.push_back(out_dir / file);
  }
  if (fs::exists(out_dir / io::kHfIndexFile, error)) packer.report.files.push_back(out_dir / io::kHfIndexFile);

  json sidecar = {{"format", kPackedFormat},
                  {"version", 1},
                  {"source", model_dir.string()},
                  {"quantization_config", quantization_config(options)},
                  {"tensors", entries}};
  if (calibration != nullptr) {
    sidecar["calibration"] = {{"prompts", calibration->prompts},
                              {"tokens", calibration->tokens},
                              {"source", calibration->source},
                              {"margin", options.calibrated.margin},
                              {"percentile", options.calibrated.percentile ? json(*options.calibrated.percentile)
                                                                           : json(nullptr)}};
  }
  write_text(out_dir / kPackSidecarFile, json_text(sidecar));
  packer.report.files.push_back(out_dir / kPackSidecarFile);
  for (const char* name : kTokenizerFiles) {
    if (!fs::is_regular_file(model_dir / name, error)) continue;
    write_text(out_dir / name, read_text(model_dir / name));
    packer.report.files.push_back(out_dir / name);
  }
  if (options.master_copy) {
    for (const std::string& file :
         io::write_hf_model_weights(out_dir / kMasterCopyDir, packer.master, options.max_shard_bytes)) {
      packer.report.files.push_back(out_dir / kMasterCopyDir / file);
    }
  }
  json out_config = source_config;
  out_config["quantization_config"] = quantization_config(options);
  out_config["torch_dtype"] = "bfloat16";  // the dense tensors are BF16 now
  if (out_config.contains("dtype")) out_config["dtype"] = "bfloat16";
  write_text(out_dir / "config.json", json_text(out_config));
  packer.report.files.push_back(out_dir / "config.json");
  return packer.report;
}

}  // namespace fp8kit::quant
