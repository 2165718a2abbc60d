// Hugging Face model directories: the weights as transformers' save_pretrained writes them (one
// model.safetensors, or model-0000K-of-0000N.safetensors shards plus model.safetensors.index.json),
// read back zero-copy from read-only mappings, and bf16 <-> f32 conversion of tensor data.
#pragma once

#include "io/safetensors.h"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace fp8kit::io {

inline constexpr std::string_view kHfWeightsFile = "model.safetensors";
inline constexpr std::string_view kHfIndexFile = "model.safetensors.index.json";
// transformers' default max_shard_size ("5GB", decimal).
inline constexpr uint64_t kHfDefaultMaxShardBytes = 5'000'000'000;

// Writes `tensors` (BF16 or F32, or FP8 codes F8_E4M3 / F8_E5M2 for packed checkpoints; HF names,
// unique) into `dir` (created if missing) as save_pretrained
// does: shards are filled in the given order, a new one begun when the next tensor would take the
// current one past max_shard_bytes of data (a tensor larger than that gets a shard of its own);
// one shard is written as model.safetensors with no index, several as model-0000K-of-0000N.safetensors
// plus the index {"metadata": {"total_parameters": elements, "total_size": data bytes},
// "weight_map": {name: file}}. Every file carries __metadata__ {"format": "pt"} (plus what
// `shard_metadata`, when given, returns for the tensors of that file) and is replaced
// atomically; the index is written last, and only then are the files of an earlier save that the
// new one does not use removed (shards of another count, model.safetensors after a sharded save,
// the index after a single-file save), so a crash leaves a loadable directory. (A crash while
// overwriting shards of the same count leaves old and new shards under the old index, as with
// transformers.) Returns the weight files written, in order.
using ShardMetadata = std::function<Metadata(std::span<const TensorView> shard)>;
std::vector<std::string> write_hf_model_weights(const std::filesystem::path& dir, std::span<const TensorView> tensors,
                                                uint64_t max_shard_bytes = kHfDefaultMaxShardBytes,
                                                const ShardMetadata& shard_metadata = {});

// The weights of an HF model directory, each file mapped once; views live as long as this object.
class HfWeights {
 public:
  // nullptr when absent.
  const TensorView* find(std::string_view name) const;
  // Throws "NAME is missing from DIR" when absent.
  const TensorView& at(std::string_view name) const;
  // The same, and throws when its shape is not `shape` (naming the tensor, its file and both shapes).
  const TensorView& at(std::string_view name, std::span<const int64_t> shape) const;
  // The file that holds `name` (which must be present), for messages.
  const std::string& file_of(std::string_view name) const;
  std::vector<std::string> names() const;  // sorted
  size_t size() const { return tensors_.size(); }
  const std::filesystem::path& directory() const { return dir_; }

 private:
  friend HfWeights open_hf_weights(const std::filesystem::path& dir);
  struct Located {
    const TensorView* view;
    const MappedSafetensors* file;
  };
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<MappedSafetensors>> files_;  // stable addresses for the views
  std::map<std::string, Located, std::less<>> tensors_;
};

// Opens `dir` as transformers loads it: model.safetensors when present, else the index and the
// shards it names (each mapped once). Every tensor must be in the file the index names, in no other
// file, and every tensor of a shard must be in the index; a missing file, a shard name that is not a
// plain file name beside the index, or malformed index JSON is a one-line error naming the file.
HfWeights open_hf_weights(const std::filesystem::path& dir);

// Tensor data as float32: F32 is copied, BF16 and F16 widened (exactly); other dtypes are refused. `out`
// must hold the tensor's element count.
void tensor_to_f32(const TensorView& tensor, std::span<float> out);
std::vector<float> tensor_to_f32(const TensorView& tensor);
// float32 values rounded to nearest even as bf16 bits, e.g. to save f32 master weights as BF16:
// TensorView{name, Dtype::BF16, shape, std::as_bytes(std::span(bits))}.
std::vector<uint16_t> f32_to_bf16(std::span<const float> values);

}  // namespace fp8kit::io
