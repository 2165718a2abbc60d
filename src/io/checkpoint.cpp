// Training checkpoints: save copies the named views into a safetensors file; load validates the
// metadata and every name and shape before restoring anything.
#include "io/checkpoint.h"

#include "base/error.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <set>

namespace fp8kit::io {

void save_checkpoint(const std::filesystem::path& path, std::span<const nn::StateEntry> tensors, Metadata metadata) {
  SafetensorsFile file;
  metadata["format"] = std::string(kTrainingCheckpointFormat);
  file.metadata = std::move(metadata);
  for (const nn::StateEntry& entry : tensors) {
    file.tensors.push_back(f32_tensor(entry.name, entry.shape, entry.data));
  }
  write_safetensors(path, file);
}

Metadata load_checkpoint(const std::filesystem::path& path, std::span<const nn::StateEntry> into,
                         std::span<const MetadataRequirement> requirements) {
  const SafetensorsFile file = read_safetensors(path);
  const auto format = file.metadata.find("format");
  FP8KIT_CHECK(format != file.metadata.end() && format->second == kTrainingCheckpointFormat,
               "{} is not an fp8kit training checkpoint (its metadata has no format \"{}\")", path.string(),
               kTrainingCheckpointFormat);
  for (const MetadataRequirement& requirement : requirements) {
    const auto found = file.metadata.find(requirement.key);
    FP8KIT_CHECK(found != file.metadata.end(), "checkpoint {} does not record its {}; it cannot be resumed safely",
                 path.string(), requirement.key);
    FP8KIT_CHECK(found->second == requirement.value, "checkpoint {} was trained with {} {} but {} {} was given",
                 path.string(), requirement.key, found->second, requirement.option, requirement.value);
  }

  std::set<std::string_view> wanted;
  for (const nn::StateEntry& entry : into) {
    const StoredTensor* stored = file.find(entry.name);
    FP8KIT_CHECK(stored != nullptr, "checkpoint {} has no tensor \"{}\"; it was saved from a different model",
                 path.string(), entry.name);
    FP8KIT_CHECK(stored->dtype == Dtype::F32, "checkpoint {}: tensor \"{}\" is {}, expected F32", path.string(),
                 entry.name, dtype_name(stored->dtype));
    FP8KIT_CHECK(stored->shape == entry.shape, "checkpoint {}: tensor \"{}\" has shape [{}] but the model needs [{}]",
                 path.string(), entry.name, fmt::join(stored->shape, ", "), fmt::join(entry.shape, ", "));
    FP8KIT_CHECK(static_cast<size_t>(stored->element_count()) == entry.data.size(),
                 "tensor \"{}\": its view holds {} values, its shape {}", entry.name, entry.data.size(),
                 stored->element_count());
    wanted.insert(entry.name);
  }
  for (const StoredTensor& stored : file.tensors) {
    FP8KIT_CHECK(wanted.contains(stored.name),
                 "checkpoint {} has a tensor \"{}\" that this model does not have; it was saved from a different "
                 "model or precision", path.string(), stored.name);
  }
  for (const nn::StateEntry& entry : into) {
    const std::vector<float> values = file.find(entry.name)->to_f32();
    std::copy(values.begin(), values.end(), entry.data.begin());
  }
  return file.metadata;
}

}  // namespace fp8kit::io
