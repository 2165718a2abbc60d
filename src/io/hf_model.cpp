// HF model directories: save_pretrained's sharding and file names, the index written last and stale
// files removed after it; the reader maps each shard once and cross-checks the index against them.
#include "io/hf_model.h"

#include "base/error.h"
#include "io/mapped_file.h"
#include "numerics/convert.h"

#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>
#include <set>

namespace fp8kit::io {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string shard_name(size_t index, size_t count) {
  return fmt::format("model-{:05d}-of-{:05d}.safetensors", index + 1, count);
}

// model-DDDDD-of-DDDDD.safetensors: a shard of some save (the files transformers removes as stale).
bool is_shard_name(std::string_view name) {
  const std::string_view pattern = "model-#####-of-#####.safetensors";
  return name.size() == pattern.size() &&
         std::equal(name.begin(), name.end(), pattern.begin(), [](char c, char p) {
           return p == '#' ? std::isdigit(static_cast<unsigned char>(c)) != 0 : c == p;
         });
}

// Every tensor is BF16, F32 or FP8, uniquely named (across shards too), with as many bytes as its shape
// needs: checked before any file is written, since overwriting shards is not undone by an error.
void check_weights(std::span<const TensorView> tensors) {
  FP8KIT_CHECK(!tensors.empty(), "no tensors to write as HF model weights");
  std::set<std::string_view> names;
  for (const TensorView& tensor : tensors) {
    FP8KIT_CHECK(!tensor.name.empty(), "an HF weight has an empty name");
    FP8KIT_CHECK(names.insert(tensor.name).second, "two HF weights are named \"{}\"; names must be unique",
                 tensor.name);
    FP8KIT_CHECK(tensor.dtype == Dtype::BF16 || tensor.dtype == Dtype::F32 || tensor.dtype == Dtype::F8_E4M3 ||
                     tensor.dtype == Dtype::F8_E5M2,
                 "HF weight \"{}\" is {}; write BF16, F32 or FP8 (f32_to_bf16 converts)", tensor.name,
                 dtype_name(tensor.dtype));
    check_tensor_bytes(tensor);
  }
}

// huggingface_hub's split_state_dict_into_shards: in order, a tensor larger than the limit gets a
// shard of its own (placed before the shard being filled); otherwise a new shard begins when the
// tensor would take the current one past the limit.
std::vector<std::vector<TensorView>> split_into_shards(std::span<const TensorView> tensors, uint64_t max_shard_bytes) {
  std::vector<std::vector<TensorView>> shards;
  std::vector<TensorView> current;
  uint64_t current_bytes = 0;
  for (const TensorView& tensor : tensors) {
    if (tensor.data.size() > max_shard_bytes) {
      shards.push_back({tensor});
      continue;
    }
    if (current_bytes + tensor.data.size() > max_shard_bytes) {
      shards.push_back(std::move(current));
      current = {};
      current_bytes = 0;
    }
    current.push_back(tensor);
    current_bytes += tensor.data.size();
  }
  if (!current.empty()) shards.push_back(std::move(current));
  return shards;
}

void write_text_atomically(const fs::path& path, std::string_view text) {
  write_file_atomically(path, std::as_bytes(std::span(text.data(), text.size())));
}

// The index as transformers writes it: json.dumps(index, indent=2, sort_keys=True) + "\n", with
// transformers 5's "total_parameters" (the element count) beside huggingface_hub's "total_size".
std::string index_json(const std::vector<std::vector<TensorView>>& shards, const std::vector<std::string>& files) {
  json weight_map = json::object();
  uint64_t total_size = 0, total_parameters = 0;
  for (size_t i = 0; i < shards.size(); ++i) {
    for (const TensorView& tensor : shards[i]) {
      weight_map[tensor.name] = files[i];
      total_size += tensor.data.size();
      total_parameters += static_cast<uint64_t>(std::accumulate(tensor.shape.begin(), tensor.shape.end(), int64_t{1},
                                                                std::multiplies<>()));
    }
  }
  const json index = {{"metadata", {{"total_parameters", total_parameters}, {"total_size", total_size}}},
                      {"weight_map", std::move(weight_map)}};
  return index.dump(2, ' ', /*ensure_ascii=*/true) + "\n";  // nlohmann's objects are sorted by key
}

// Removes the weight files of an earlier save that `written` does not include.
void remove_stale_files(const fs::path& dir, const std::vector<std::string>& written) {
  const bool sharded = written.size() > 1;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    const bool ours = is_shard_name(name) || name == kHfWeightsFile || (name == kHfIndexFile && !sharded);
    std::error_code error;
    if (!ours || !entry.is_regular_file(error) || std::ranges::find(written, name) != written.end()) continue;
    FP8KIT_CHECK(fs::remove(entry.path(), error), "cannot remove {}, left from an earlier save: {}",
                 entry.path().string(), error.message());
  }
}

// The index's weight_map (tensor name -> shard file name), every file a plain name beside the index.
std::map<std::string, std::string> read_weight_map(const fs::path& index_path) {
  const MappedFile file(index_path);
  const std::string_view text(reinterpret_cast<const char*>(file.bytes().data()), file.bytes().size());
  const std::string source = index_path.string();
  json index;
  try {
    index = json::parse(text);
  } catch (const json::exception& e) {
    fail("{} is not valid JSON ({}); save the model again", source, printable(e.what()));
  }
  FP8KIT_CHECK(index.is_object() && index.contains("weight_map") && index["weight_map"].is_object(),
               "{} has no \"weight_map\" object; it is not a safetensors index", source);
  std::map<std::string, std::string> weight_map;
  for (const auto& [name, file_name] : index["weight_map"].items()) {
    FP8KIT_CHECK(file_name.is_string(), "{}: the weight_map entry of \"{}\" is {}, not a file name", source,
                 printable(name), file_name.type_name());
    const auto& shard = file_name.get_ref<const std::string&>();
    FP8KIT_CHECK(!shard.empty() && shard != "." && shard != ".." && shard.find('/') == std::string::npos &&
                     shard.find('\0') == std::string::npos,
                 "{}: tensor \"{}\" is in \"{}\", which is not a file name beside the index", source, printable(name),
                 printable(shard));
    weight_map.emplace(name, shard);
  }
  FP8KIT_CHECK(!weight_map.empty(), "{} lists no tensors in its weight_map", source);
  return weight_map;
}

}  // namespace

std::vector<std::string> write_hf_model_weights(const fs::path& dir, std::span<const TensorView> tensors,
                                                uint64_t max_shard_bytes, const ShardMetadata& shard_metadata) {
  FP8KIT_CHECK(max_shard_bytes > 0, "the maximum shard size must be positive");
  check_weights(tensors);
  const std::vector<std::vector<TensorView>> shards = split_into_shards(tensors, max_shard_bytes);
  std::vector<std::string> files;
  for (size_t i = 0; i < shards.size(); ++i) {
    files.push_back(shards.size() == 1 ? std::string(kHfWeightsFile) : shard_name(i, shards.size()));
  }
  std::error_code error;
  fs::create_directories(dir, error);
  FP8KIT_CHECK(!error, "cannot create the model directory {}: {}", dir.string(), error.message());
  for (size_t i = 0; i < shards.size(); ++i) {
    Metadata metadata = shard_metadata ? shard_metadata(shards[i]) : Metadata{};
    metadata["format"] = "pt";  // transformers refuses safetensors files without it
    write_safetensors(dir / files[i], metadata, shards[i]);
  }
  if (shards.size() > 1) write_text_atomically(dir / kHfIndexFile, index_json(shards, files));
  remove_stale_files(dir, files);
  return files;
}

const TensorView* HfWeights::find(std::string_view name) const {
  const auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : it->second.view;
}

const TensorView& HfWeights::at(std::string_view name) const {
  const TensorView* tensor = find(name);
  FP8KIT_CHECK(tensor != nullptr, "{} is missing from {}", name, dir_.string());
  return *tensor;
}

const TensorView& HfWeights::at(std::string_view name, std::span<const int64_t> shape) const {
  const TensorView& tensor = at(name);
  FP8KIT_CHECK(std::ranges::equal(tensor.shape, shape), "{} in {} has shape [{}] but the model needs [{}]", name,
               file_of(name), fmt::join(tensor.shape, ", "), fmt::join(shape, ", "));
  return tensor;
}

const std::string& HfWeights::file_of(std::string_view name) const {
  const auto it = tensors_.find(name);
  FP8KIT_CHECK(it != tensors_.end(), "{} is missing from {}", name, dir_.string());
  return it->second.file->source();
}

std::vector<std::string> HfWeights::names() const {
  std::vector<std::string> names;
  for (const auto& [name, unused] : tensors_) names.push_back(name);
  return names;
}

HfWeights open_hf_weights(const fs::path& dir) {
  HfWeights weights;
  weights.dir_ = dir;
  std::error_code error;
  FP8KIT_CHECK(fs::is_directory(dir, error), "{} is not a directory; give a Hugging Face model directory",
               dir.string());
  const fs::path single = dir / kHfWeightsFile, index = dir / kHfIndexFile;
  // transformers prefers model.safetensors over an index, and so do we.
  if (fs::exists(single, error)) {
    const auto& file = *weights.files_.emplace_back(std::make_unique<MappedSafetensors>(single));
    for (const TensorView& tensor : file.view().tensors) {
      weights.tensors_.emplace(tensor.name, HfWeights::Located{&tensor, &file});
    }
    return weights;
  }
  FP8KIT_CHECK(fs::exists(index, error), "{} holds neither {} nor {}; save the model with safetensors weights",
               dir.string(), kHfWeightsFile, kHfIndexFile);
  const std::map<std::string, std::string> weight_map = read_weight_map(index);
  std::set<std::string> shard_names;
  for (const auto& [name, shard] : weight_map) shard_names.insert(shard);
  for (const std::string& shard : shard_names) {
    const fs::path path = dir / shard;
    FP8KIT_CHECK(fs::exists(path, error), "{} puts tensors in {}, which does not exist; the save is incomplete",
                 index.string(), path.string());
    const auto& file = *weights.files_.emplace_back(std::make_unique<MappedSafetensors>(path));
    for (const TensorView& tensor : file.view().tensors) {
      const std::string_view name = tensor.name;  // printable() in messages: it comes from the file
      const auto [it, added] = weights.tensors_.emplace(tensor.name, HfWeights::Located{&tensor, &file});
      FP8KIT_CHECK(added, "tensor \"{}\" is in both {} and {}; a name must be in one file only", printable(name),
                   it->second.file->source(), path.string());
      const auto listed = weight_map.find(tensor.name);
      FP8KIT_CHECK(listed != weight_map.end(), "tensor \"{}\" in {} is not in the weight_map of {}; the index is stale",
                   printable(name), path.string(), index.string());
      FP8KIT_CHECK(listed->second == shard, "tensor \"{}\" is in {} but {} puts it in {}", printable(name),
                   path.string(), index.string(), printable(listed->second));
    }
  }
  for (const auto& [name, shard] : weight_map) {
    FP8KIT_CHECK(weights.tensors_.contains(name), "{} puts tensor \"{}\" in {}, which does not hold it",
                 index.string(), printable(name), (dir / shard).string());
  }
  return weights;
}

namespace {

// IEEE half to float, exactly (every half is a float): subnormals scaled, infinities and NaNs kept.
float f16_to_f32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1Fu, mantissa = h & 0x3FFu;
  if (exponent == 0) return std::bit_cast<float>(sign) + (sign ? -1.0f : 1.0f) * std::ldexp(float(mantissa), -24);
  if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
  return std::bit_cast<float>(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

}  // namespace

void tensor_to_f32(const TensorView& tensor, std::span<float> out) {
  FP8KIT_CHECK(tensor.dtype == Dtype::BF16 || tensor.dtype == Dtype::F16 || tensor.dtype == Dtype::F32,
               "tensor \"{}\" is {}; only BF16, F16 and F32 weights can be loaded", printable(tensor.name),
               dtype_name(tensor.dtype));
  const size_t count = tensor.data.size() / dtype_size(tensor.dtype);
  FP8KIT_CHECK(out.size() == count, "tensor \"{}\" holds {} values but room for {} was given", printable(tensor.name),
               count, out.size());
  if (tensor.dtype == Dtype::F32) {
    if (count > 0) std::memcpy(out.data(), tensor.data.data(), tensor.data.size());
    return;
  }
  // Mapped data need not be 2-byte aligned, so it is copied out in chunks large enough for the bulk
  // conversion's threads.
  constexpr size_t kChunk = size_t{1} << 20;
  std::vector<uint16_t> bits(std::min(count, kChunk));
  for (size_t begin = 0; begin < count; begin += kChunk) {
    const size_t n = std::min(kChunk, count - begin);
    std::memcpy(bits.data(), tensor.data.data() + begin * sizeof(uint16_t), n * sizeof(uint16_t));
    if (tensor.dtype == Dtype::BF16) {
      bf16_to_float(std::span<const uint16_t>(bits.data(), n), out.subspan(begin, n));
    } else {
      std::transform(bits.begin(), bits.begin() + static_cast<ptrdiff_t>(n), out.begin() + begin, f16_to_f32);
    }
  }
}

std::vector<float> tensor_to_f32(const TensorView& tensor) {
  std::vector<float> values(tensor.data.size() / dtype_size(tensor.dtype));
  tensor_to_f32(tensor, values);
  return values;
}

std::vector<uint16_t> f32_to_bf16(std::span<const float> values) {
  std::vector<uint16_t> bits(values.size());
  float_to_bf16(values, bits);
  return bits;
}

}  // namespace fp8kit::io
