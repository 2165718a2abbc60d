// Where the trainer runs training steps and evaluation: the CPU (the SeedClassifier and Adam
// themselves) or a device with its own copy of the state (the GPU), synchronised with the host
// objects, which hold the state that checkpoints save and resume restores.
#pragma once

#include "models/seed_classifier.h"
#include "optim/adam.h"

#include <cstdint>
#include <memory>
#include <span>

namespace fp8kit::train {

struct StepResult {
  float loss = 0;  // NaN when the probabilities hold a NaN (the CPU then skips backward and Adam)
  std::span<const float> probabilities;  // [batch], valid until the next call
};

class StepDevice {
 public:
  virtual ~StepDevice() = default;
  // One training step: forward with dropout keyed by (seed, step), backward, Adam, FP8 scaling
  // update. tokens [batch, sequence_length], labels [batch]; batch may change between calls.
  virtual StepResult train_step(std::span<const int32_t> tokens, std::span<const float> labels, int batch,
                                int64_t step) = 0;
  // Probabilities [batch] without dropout, FP8 scales frozen; valid until the next call.
  virtual std::span<const float> predict(std::span<const int32_t> tokens, int batch) = 0;
  // Device state -> the host model and Adam (before checkpoints, finiteness checks, the end).
  virtual void pull() = 0;
  // The host model and Adam -> device (after a resume).
  virtual void push() = 0;
};

// The CPU: steps run on `model` and `adam` directly (pull and push do nothing).
std::unique_ptr<StepDevice> cpu_step_device(models::SeedClassifier& model, optim::Adam& adam);

}  // namespace fp8kit::train
