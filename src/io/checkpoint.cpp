// Training checkpoints: save copies the named views into a safetensors file; load maps the file and
// validates the metadata, every name and shape, and every value against its entry's domain before
// restoring anything.
#include "io/checkpoint.h"

#include "base/error.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <set>

namespace fp8kit::io {

namespace {

// The first value of `values` outside `domain`, with its index.
std::optional<std::pair<size_t, float>> first_outside(std::span<const std::byte> values, nn::Domain domain) {
  for (size_t i = 0; i < values.size() / sizeof(float); ++i) {
    float value;
    std::memcpy(&value, values.data() + i * sizeof(float), sizeof(float));  // mapped data need not be aligned
    if (!nn::in_domain(value, domain)) return std::pair{i, value};
  }
  return std::nullopt;
}

}  // namespace

void save_checkpoint(const std::filesystem::path& path, std::span<const nn::StateEntry> tensors, Metadata metadata) {
  SafetensorsFile file;
  metadata["format"] = std::string(kTrainingCheckpointFormat);
  file.metadata = std::move(metadata);
  for (const nn::StateEntry& entry : tensors) {
    // Never write a checkpoint that load_checkpoint would refuse.
    const auto bad = first_outside(std::as_bytes(entry.data), entry.domain);
    FP8KIT_CHECK(!bad, "not saving checkpoint {}: tensor \"{}\" holds {} at index {}, but must be {}", path.string(),
                 entry.name, bad->second, bad->first, nn::requirement(entry.domain));
    file.tensors.push_back(f32_tensor(entry.name, entry.shape, entry.data));
  }
  write_safetensors(path, file);
}

Metadata load_checkpoint(const std::filesystem::path& path, std::span<const nn::StateEntry> into,
                         std::span<const MetadataRequirement> requirements) {
  const MappedSafetensors mapped(path);
  const SafetensorsView& file = mapped.view();
  const auto format = file.metadata.find("format");
  FP8KIT_CHECK(format != file.metadata.end() && format->second == kTrainingCheckpointFormat,
               "{} is not an fp8kit training checkpoint (its metadata has no format \"{}\")", path.string(),
               kTrainingCheckpointFormat);
  for (const MetadataRequirement& requirement : requirements) {
    const auto found = file.metadata.find(requirement.key);
    if (found == file.metadata.end() && requirement.may_be_absent) continue;
    FP8KIT_CHECK(found != file.metadata.end(), "checkpoint {} does not record its {}; it cannot be resumed safely",
                 path.string(), requirement.key);
    FP8KIT_CHECK(found->second == requirement.value, "checkpoint {} was trained with {} {} but {} {} was given",
                 path.string(), requirement.key, printable(found->second), requirement.option, requirement.value);
  }

  std::set<std::string_view> wanted;
  for (const nn::StateEntry& entry : into) {
    const TensorView* stored = file.find(entry.name);
    FP8KIT_CHECK(stored != nullptr, "checkpoint {} has no tensor \"{}\"; it was saved from a different model",
                 path.string(), entry.name);
    FP8KIT_CHECK(stored->dtype == Dtype::F32, "checkpoint {}: tensor \"{}\" is {}, expected F32", path.string(),
                 entry.name, dtype_name(stored->dtype));
    FP8KIT_CHECK(stored->shape == entry.shape, "checkpoint {}: tensor \"{}\" has shape [{}] but the model needs [{}]",
                 path.string(), entry.name, fmt::join(stored->shape, ", "), fmt::join(entry.shape, ", "));
    FP8KIT_CHECK(stored->data.size() == entry.data.size_bytes(),
                 "tensor \"{}\": its view holds {} values, its shape {}", entry.name, entry.data.size(),
                 stored->data.size() / sizeof(float));
    const auto bad = first_outside(stored->data, entry.domain);
    FP8KIT_CHECK(!bad, "checkpoint {}: tensor \"{}\" holds {} at index {}, but must be {}; the file is corrupt",
                 path.string(), entry.name, bad->second, bad->first, nn::requirement(entry.domain));
    wanted.insert(entry.name);
  }
  for (const TensorView& stored : file.tensors) {
    FP8KIT_CHECK(wanted.contains(stored.name),
                 "checkpoint {} has a tensor \"{}\" that this model does not have; it was saved from a different "
                 "model or precision", path.string(), printable(stored.name));
  }
  for (const nn::StateEntry& entry : into) {
    const std::span<const std::byte> data = file.find(entry.name)->data;
    if (!data.empty()) std::memcpy(entry.data.data(), data.data(), data.size());
  }
  return file.metadata;
}

}  // namespace fp8kit::io
