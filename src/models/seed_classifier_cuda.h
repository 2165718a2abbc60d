// The seed classifier's training step on the GPU (the llm.c train_gpt2.cu way): a twin of
// SeedClassifier with the same parameters, weights, dropout masks and rounding points, activations
// preallocated for one batch size, an explicit forward/backward sequence of CUDA kernels and cuBLASLt
// GEMMs (fused where the CPU's rounding points allow), Adam over all parameters in one launch, the FP8
// scaling update in one launch, and the whole step captured once as a CUDA graph and replayed (the
// weight gradients and key/value GEMMs on parallel branches of it, on streams of their own).
#pragma once

#include "models/seed_classifier.h"
#include "optim/adam.h"

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

namespace fp8kit::models {

class SeedClassifierCuda {
 public:
  // Copies config, precision, FP8 recipe and current weights from `cpu`; `seed` must be the seed the
  // CPU model was built with (it keys the dropout masks). Every step has exactly `batch` examples.
  // Fp8: delayed scaling (te and keras lags) and current scaling. Steps are deterministic: the same
  // inputs and state give the same bits (no atomics), so load_state resumes a run bit for bit.
  SeedClassifierCuda(SeedClassifier& cpu, uint64_t seed, int batch, optim::AdamOptions adam = {});
  ~SeedClassifierCuda();
  SeedClassifierCuda(const SeedClassifierCuda&) = delete;
  SeedClassifierCuda& operator=(const SeedClassifierCuda&) = delete;

  int batch() const;
  // The dropout step counter: step s draws SeedClassifier::forward(..., step = s)'s masks. update()
  // and train_step() advance it. Starts at 0.
  void set_step(uint64_t step);
  uint64_t step() const;

  // Forward and backward of one training step without the optimizer (eager launches; the FP8
  // scaling state moves as on the CPU): tokens [batch, seq], labels [batch]. Returns the loss.
  float forward_backward(std::span<const int32_t> tokens, std::span<const float> labels);
  // Adam over every parameter from the gradients of the last forward_backward; advances the step.
  void update();
  // forward_backward + update as one CUDA graph replay (captured at the first call). Returns the loss.
  float train_step(std::span<const int32_t> tokens, std::span<const float> labels);
  // The same from device pointers, without waiting: for timing whole epochs. loss() waits.
  void enqueue_train_step(const int32_t* device_tokens, const float* device_labels);
  float loss() const;

  // Probabilities [batch] without dropout, FP8 scales frozen (evaluation).
  std::vector<float> predict(std::span<const int32_t> tokens);

  // The probabilities [batch] of the last train_step or forward_backward (waits for the step).
  std::vector<float> probabilities() const;

  // Writes the GPU's weights and last gradients into the CPU model's parameters (same order and names).
  void copy_to(SeedClassifier& cpu) const;

  // The whole training state, both ways, in the CPU objects' names and layouts (so checkpoints do not
  // depend on the device): weights, FP8 scales and amax histories (cpu.fp8_state()), Adam's m, v and
  // iterations (adam.state(), adam built over cpu.parameters()); load_state also sets step() to
  // adam.iterations(). `cpu` must have this model's config and precision.
  void load_state(SeedClassifier& cpu, optim::Adam& adam);
  void store_state(SeedClassifier& cpu, optim::Adam& adam) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp8kit::models
