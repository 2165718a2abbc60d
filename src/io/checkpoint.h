// Training checkpoints: named float32 tensors (weights, optimizer state, FP8 scales and amax
// histories as ordinary tensors) plus string metadata, in one atomically written safetensors file.
#pragma once

#include "io/safetensors.h"
#include "nn/parameter.h"

#include <filesystem>
#include <span>
#include <string>

namespace fp8kit::io {

// The "format" metadata value that marks an fp8kit training checkpoint.
inline constexpr std::string_view kTrainingCheckpointFormat = "fp8kit-training-checkpoint-v1";

// A metadata value the checkpoint must carry to be loaded into this run. On mismatch the error
// reads "checkpoint PATH was trained with <key> <theirs> but <option> <value> was given".
struct MetadataRequirement {
  std::string key;
  std::string value;
  std::string option;  // how the user sets it, e.g. "--precision"
  // A checkpoint without the key is accepted (one written before the key was recorded).
  bool may_be_absent = false;
};

// Writes every tensor (copied from the views) and the metadata, plus "format"; replaces `path`
// atomically. Refuses (writing nothing) a value outside its entry's domain.
void save_checkpoint(const std::filesystem::path& path, std::span<const nn::StateEntry> tensors, Metadata metadata);

// Checks the requirements, then copies the checkpoint's tensors into `into`: every entry must be in
// the file with the same shape and every value in the entry's domain (the error names the file,
// the tensor and the first bad index and value), and the file must hold no other tensor. Nothing
// is written into `into` unless all checks pass. Returns the metadata.
Metadata load_checkpoint(const std::filesystem::path& path, std::span<const nn::StateEntry> into,
                         std::span<const MetadataRequirement> requirements);

}  // namespace fp8kit::io
