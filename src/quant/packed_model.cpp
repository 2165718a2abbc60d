// The packed-model reader: quantization_config in either form, then every projection, scale and KV
// scale checked against the Llama config before anything is handed out.
#include "quant/packed_model.h"

#include "base/error.h"
#include "io/mapped_file.h"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <regex>

namespace fp8kit::quant {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

int64_t cdiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// The value at `key` when it is present and not null.
const json* field(const json& object, const char* key) {
  const auto it = object.find(key);
  return it == object.end() || it->is_null() ? nullptr : &*it;
}

std::string string_field(const json& object, const char* key, const std::string& source) {
  const json* value = field(object, key);
  FP8KIT_CHECK(value != nullptr && value->is_string(), "{}: quantization_config has no string \"{}\"", source, key);
  return value->get<std::string>();
}

std::vector<std::string> string_list(const json& object, const char* key, const std::string& source) {
  std::vector<std::string> list;
  if (const json* value = field(object, key)) {
    FP8KIT_CHECK(value->is_array(), "{}: quantization_config's \"{}\" is not a list", source, key);
    for (const json& item : *value) {
      FP8KIT_CHECK(item.is_string(), "{}: quantization_config's \"{}\" holds a non-string", source, key);
      list.push_back(item.get<std::string>());
    }
  }
  return list;
}

// compressed-tensors' QuantizationArgs of weights: 8-bit float, strategy tensor, channel, group or
// block (128x128).
void parse_weight_args(const json& args, const std::string& source, PackedQuantization& q) {
  FP8KIT_CHECK(args.is_object(), "{}: the config group has no \"weights\" arguments", source);
  const json* bits = field(args, "num_bits");
  const json* type = field(args, "type");
  FP8KIT_CHECK(bits && *bits == 8 && type && type->is_string() && type->get<std::string>() == "float",
               "{}: the weights are not 8-bit floats (num_bits {}, type {}); fp8kit reads FP8 checkpoints", source,
               bits ? bits->dump() : "null", type ? type->dump() : "null");
  const std::string strategy = string_field(args, "strategy", source);
  if (strategy == "tensor") {
    q.weights = Granularity::PerTensor;
  } else if (strategy == "channel") {
    q.weights = Granularity::PerRow;
  } else if (strategy == "group") {
    q.weights = Granularity::PerGroup;
    const json* group = field(args, "group_size");
    FP8KIT_CHECK(group && group->is_number_integer() && group->get<int64_t>() > 0,
                 "{}: group weights need a positive \"group_size\"", source);
    q.group_size = group->get<int64_t>();
  } else if (strategy == "block") {
    q.weights = Granularity::Block128x128;
    const json* block = field(args, "block_structure");
    FP8KIT_CHECK(block && *block == json::array({128, 128}), "{}: block weights must have \"block_structure\" [128, 128], not {}",
                 source, block ? block->dump() : "null");
  } else {
    fail("{}: weight strategy \"{}\" is not one fp8kit reads (tensor, channel, group, block)", source, strategy);
  }
}

PackedQuantization parse_quantization(const json& config, const std::string& source) {
  const json* qc = field(config, "quantization_config");
  FP8KIT_CHECK(qc && qc->is_object(), "{} has no quantization_config; it is not a packed FP8 model", source);
  PackedQuantization q;
  q.method = string_field(*qc, "quant_method", source);
  if (q.method == "fp8") {
    const std::string scheme = string_field(*qc, "activation_scheme", source);
    FP8KIT_CHECK(scheme == "static" || scheme == "dynamic",
                 "{}: activation_scheme is \"{}\"; vLLM's fp8 method has \"static\" or \"dynamic\"", source, scheme);
    q.activations = scheme == "static" ? ActivationScheme::Static : ActivationScheme::Dynamic;
    q.ignore = string_list(*qc, "ignored_layers", source);
    if (const json* block = field(*qc, "weight_block_size")) {
      FP8KIT_CHECK(*block == json::array({128, 128}), "{}: weight_block_size {} is not [128, 128]", source,
                   block->dump());
      q.weights = Granularity::Block128x128;
    }
    return q;
  }
  FP8KIT_CHECK(q.method == "compressed-tensors",
               "{}: quant_method \"{}\" is not FP8; fp8kit reads \"compressed-tensors\" and \"fp8\"", source, q.method);
  const std::string format = string_field(*qc, "format", source);
  FP8KIT_CHECK(format == "float-quantized" || format == "naive-quantized",
               "{}: compressed-tensors format \"{}\" is not FP8 (\"float-quantized\")", source, format);
  const json* groups = field(*qc, "config_groups");
  FP8KIT_CHECK(groups && groups->is_object() && groups->size() == 1,
               "{}: quantization_config needs exactly one config group (fp8kit packs every projection alike)", source);
  const json& group = groups->begin().value();
  FP8KIT_CHECK(group.is_object(), "{}: the config group is not an object", source);
  parse_weight_args(group.value("weights", json()), source, q);
  if (const json* inputs = field(group, "input_activations")) {
    const json* dynamic = field(*inputs, "dynamic");
    const bool is_dynamic = dynamic == nullptr || (dynamic->is_boolean() && dynamic->get<bool>()) || dynamic->is_string();
    q.activations = is_dynamic ? ActivationScheme::Dynamic : ActivationScheme::Static;
    FP8KIT_CHECK(is_dynamic || string_field(*inputs, "strategy", source) == "tensor",
                 "{}: static input activations must be per tensor", source);
  } else {
    q.activations = ActivationScheme::None;
  }
  q.ignore = string_list(*qc, "ignore", source);
  q.fp8_kv_cache = field(*qc, "kv_cache_scheme") != nullptr;
  return q;
}

bool ignored(const std::vector<std::string>& ignore, const std::string& module) {
  for (const std::string& pattern : ignore) {
    if (pattern == module) return true;
    if (pattern.starts_with("re:") && std::regex_match(module, std::regex(pattern.substr(3)))) return true;
  }
  return false;
}

std::string shape_text(const std::vector<int64_t>& shape) { return fmt::format("[{}]", fmt::join(shape, ", ")); }

// A scale tensor's values: F32, BF16 or F16, each finite and > 0.
std::vector<float> scale_values(const io::TensorView& t, const io::HfWeights& weights) {
  FP8KIT_CHECK(t.dtype == io::Dtype::F32 || t.dtype == io::Dtype::BF16 || t.dtype == io::Dtype::F16,
               "{} in {} is {}; a scale is F32 (or BF16, F16)", io::printable(t.name), weights.file_of(t.name),
               io::dtype_name(t.dtype));
  std::vector<float> values = io::tensor_to_f32(t);
  for (size_t i = 0; i < values.size(); ++i) {
    FP8KIT_CHECK(std::isfinite(values[i]) && values[i] > 0.0f,
                 "{} in {} holds {} at index {}; a scale must be finite and > 0", io::printable(t.name),
                 weights.file_of(t.name), values[i], i);
  }
  return values;
}

bool is_scalar_shape(const std::vector<int64_t>& shape) { return shape.empty() || shape == std::vector<int64_t>{1}; }

PackedLinear open_linear(const io::HfWeights& weights, const PackedQuantization& q, const models::WeightShape& w) {
  PackedLinear linear;
  linear.name = w.name.substr(0, w.name.size() - std::string_view(".weight").size());
  linear.weight = &weights.at(w.name, w.shape);
  const io::Dtype dtype = linear.weight->dtype;
  const std::string file = weights.file_of(w.name);
  if (ignored(q.ignore, linear.name)) {
    FP8KIT_CHECK(dtype == io::Dtype::BF16 || dtype == io::Dtype::F32 || dtype == io::Dtype::F16,
                 "{} in {} is {}, but the quantization_config keeps {} dense (BF16, F32 or F16)", w.name, file,
                 io::dtype_name(dtype), linear.name);
    return linear;
  }
  FP8KIT_CHECK(dtype == io::Dtype::F8_E4M3 || dtype == io::Dtype::F8_E5M2,
               "{} in {} is {}; a packed projection is F8_E4M3 (or F8_E5M2)", w.name, file, io::dtype_name(dtype));
  linear.granularity = q.weights;
  linear.group = q.weights == Granularity::PerGroup ? q.group_size : q.weights == Granularity::Block128x128 ? 128 : 0;
  const io::TensorView* scale = weights.find(linear.name + ".weight_scale");
  if (scale == nullptr && q.weights == Granularity::Block128x128) scale = weights.find(linear.name + ".weight_scale_inv");
  FP8KIT_CHECK(scale != nullptr, "{}.weight_scale is missing from {}; a packed projection needs its scale", linear.name,
               weights.directory().string());
  linear.scale = scale;
  const int64_t out = w.shape[0], in = w.shape[1];
  const std::vector<int64_t>& s = scale->shape;
  bool allowed = false;
  std::string expected;
  switch (q.weights) {
    case Granularity::PerTensor:
      allowed = is_scalar_shape(s);
      expected = "[] or [1] (per tensor)";
      break;
    case Granularity::PerRow:
      allowed = s == std::vector<int64_t>{out, 1} || s == std::vector<int64_t>{out};
      expected = fmt::format("[{}, 1] (per output channel)", out);
      break;
    case Granularity::PerGroup:
      allowed = s == std::vector<int64_t>{out, cdiv(in, q.group_size)};
      expected = fmt::format("[{}, {}] (groups of {} along the input)", out, cdiv(in, q.group_size), q.group_size);
      break;
    default:
      allowed = s == std::vector<int64_t>{cdiv(out, 128), cdiv(in, 128)};
      expected = fmt::format("[{}, {}] (128x128 blocks)", cdiv(out, 128), cdiv(in, 128));
  }
  FP8KIT_CHECK(allowed, "{} in {} has shape {} but the scales of the {} weight {} are {}", scale->name,
               weights.file_of(scale->name), shape_text(s), shape_text(w.shape), w.name, expected);
  scale_values(*scale, weights);
  if (q.activations == ActivationScheme::Static) {
    const io::TensorView* input = weights.find(linear.name + ".input_scale");
    FP8KIT_CHECK(input != nullptr, "{}.input_scale is missing from {}; static activations need one per projection",
                 linear.name, weights.directory().string());
    FP8KIT_CHECK(is_scalar_shape(input->shape), "{} in {} has shape {}; an input scale is [] or [1]", input->name,
                 weights.file_of(input->name), shape_text(input->shape));
    linear.input_scale = scale_values(*input, weights)[0];
  }
  return linear;
}

// A layer's k or v scale: per tensor ([] or [1]) repeated per KV head, or per head ([kv_heads] or
// [kv_heads, 1, 1]); absent: 1.0.
std::vector<float> open_kv_scale(const io::HfWeights& weights, const models::LlamaConfig& config, int64_t layer,
                                 const char* kv, bool& found) {
  const std::string prefix = "model.layers." + std::to_string(layer) + ".self_attn.";
  const io::TensorView* t = weights.find(prefix + kv + "_scale");
  if (t == nullptr) t = weights.find(prefix + kv + "_proj.output_scale");  // older compressed-tensors files
  const int64_t heads = config.num_key_value_heads;
  if (t == nullptr) return std::vector<float>(static_cast<size_t>(heads), 1.0f);
  found = true;
  const bool per_head = t->shape == std::vector<int64_t>{heads} || t->shape == std::vector<int64_t>{heads, 1, 1};
  FP8KIT_CHECK(per_head || is_scalar_shape(t->shape),
               "{} in {} has shape {}; a KV cache scale is [], [1] or one per KV head [{}]", t->name,
               weights.file_of(t->name), shape_text(t->shape), heads);
  const std::vector<float> values = scale_values(*t, weights);
  return per_head ? values : std::vector<float>(static_cast<size_t>(heads), values[0]);
}

}  // namespace

Fp8Format PackedLinear::format() const {
  return weight->dtype == io::Dtype::F8_E5M2 ? Fp8Format::E5M2 : Fp8Format::E4M3;
}

BlockShape PackedLinear::block() const {
  const size_t rows = static_cast<size_t>(weight->shape[0]), cols = static_cast<size_t>(weight->shape[1]);
  return block_shape(granularity, rows, cols, static_cast<size_t>(group > 0 ? group : 64));
}

std::vector<float> PackedLinear::scale_inv() const {
  FP8KIT_CHECK(scale != nullptr, "{} is dense; it has no scales", name);
  return io::tensor_to_f32(*scale);
}

const PackedLinear& PackedModel::linear(std::string_view name) const {
  const auto it = by_name_.find(name);
  FP8KIT_CHECK(it != by_name_.end(), "the packed model has no projection \"{}\"", name);
  return linears_[it->second];
}

std::vector<float> PackedModel::k_scale(int64_t layer) const {
  FP8KIT_CHECK(layer >= 0 && layer < config_.num_hidden_layers, "layer {} is outside the model's {} layers", layer,
               config_.num_hidden_layers);
  return k_scales_[static_cast<size_t>(layer)];
}

std::vector<float> PackedModel::v_scale(int64_t layer) const {
  FP8KIT_CHECK(layer >= 0 && layer < config_.num_hidden_layers, "layer {} is outside the model's {} layers", layer,
               config_.num_hidden_layers);
  return v_scales_[static_cast<size_t>(layer)];
}

PackedModel open_packed_model(const fs::path& dir) {
  PackedModel model;
  const fs::path config_path = dir / "config.json";
  const std::string source = config_path.string();
  model.config_ = models::read_llama_config(dir);
  {
    const io::MappedFile file(config_path);
    const std::string_view text(reinterpret_cast<const char*>(file.bytes().data()), file.bytes().size());
    json config;
    try {
      config = json::parse(text);
    } catch (const json::exception& e) {
      fail("{} is not valid JSON ({})", source, io::printable(e.what()));
    }
    model.quantization_ = parse_quantization(config, source);
  }
  model.weights_ = io::open_hf_weights(dir);
  bool kv_found = false;
  for (int64_t layer = 0; layer < model.config_.num_hidden_layers; ++layer) {
    for (const models::WeightShape& w : models::llama_layer_weights(model.config_, layer)) {
      if (!w.name.ends_with("_proj.weight")) continue;
      model.linears_.push_back(open_linear(model.weights_, model.quantization_, w));
      model.by_name_.emplace(model.linears_.back().name, model.linears_.size() - 1);
    }
    model.k_scales_.push_back(open_kv_scale(model.weights_, model.config_, layer, "k", kv_found));
    model.v_scales_.push_back(open_kv_scale(model.weights_, model.config_, layer, "v", kv_found));
  }
  model.quantization_.fp8_kv_cache = model.quantization_.fp8_kv_cache || kv_found;
  for (const models::WeightShape& w : models::llama_weights(model.config_)) {
    if (w.name.ends_with("_proj.weight")) continue;
    const io::TensorView& t = model.weights_.at(w.name, w.shape);
    FP8KIT_CHECK(t.dtype == io::Dtype::BF16 || t.dtype == io::Dtype::F32 || t.dtype == io::Dtype::F16,
                 "{} in {} is {}; embeddings, norms and lm_head stay BF16, F32 or F16", w.name,
                 model.weights_.file_of(w.name), io::dtype_name(t.dtype));
  }
  return model;
}

std::vector<float> dequantize(const PackedLinear& linear) {
  if (!linear.fp8()) return io::tensor_to_f32(*linear.weight);
  const size_t rows = static_cast<size_t>(linear.weight->shape[0]), cols = static_cast<size_t>(linear.weight->shape[1]);
  const auto codes = std::span(reinterpret_cast<const uint8_t*>(linear.weight->data.data()), rows * cols);
  std::vector<float> out(rows * cols);
  dequantize_blocks(codes, rows, cols, linear.format(), linear.block(), linear.scale_inv(), out);
  return out;
}

}  // namespace fp8kit::quant
