// The seed experiment's IMDB classifier (spec/seed-experiment.md, 653,953 parameters): token +
// position embedding, one post-LN causal Transformer decoder block, mean pooling, a 2-layer head.
// Written once on device-generic layers: it runs on the CPU (the exact reference) or a CUDA GPU,
// in fp32, mixed bf16 or FP8. A training step is a pure function of (weights, optimizer and FP8 state,
// batch, seed, step): on a given CPU (OpenBLAS and the AVX2 kernels pick code by CPU) its bits do not
// depend on the OpenMP thread count, and on the GPU it uses no float atomics, so runs and resumes
// reproduce exactly.
#pragma once

#include "nn/parameter.h"
#include "nn/precision.h"
#include "numerics/recipe.h"
#include "ops/context.h"
#include "ops/scaling_table.h"
#include "tensor/tensor.h"

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace fp8kit::models {

struct SeedClassifierConfig {
  int vocabulary_size = 20000;
  int sequence_length = 200;
  int hidden_dim = 32;
  int num_heads = 2;
  int intermediate_dim = 32;
  float dropout = 0.1f;
};

class SeedClassifier {
 public:
  // Initialises the weights as the spec says (Glorot-uniform kernels, uniform(-0.05, 0.05)
  // embeddings, zero biases, LayerNorm gamma 1 / beta 0) from std::mt19937_64(seed), on the CPU, then
  // puts the model on `device`. The same seed keys the dropout masks: a training step's masks depend
  // only on (seed, step).
  SeedClassifier(const SeedClassifierConfig& config, uint64_t seed, Device device = Device::Cpu);
  ~SeedClassifier();
  SeedClassifier(SeedClassifier&&) noexcept;
  SeedClassifier& operator=(SeedClassifier&&) noexcept;

  // Fp8 == quantize(model, recipe): exactly the 8 Linears become FP8, the rest runs as mixed bf16.
  // Always resets the FP8 scaling state (scales 1.0, histories 0). Weights are untouched.
  void set_precision(nn::Precision precision, const Fp8Recipe& recipe = {});
  nn::Precision precision() const;
  const Fp8Recipe& recipe() const;
  const SeedClassifierConfig& config() const;

  Device device() const;
  // Where the model's ops run: its device, the dropout seed and the step.
  ops::Context& context();

  // tokens: [batch, sequence_length] int32 on the host, row-major, ids in [0, vocabulary_size) (else
  // throws). Returns the probabilities [batch] on the host (valid until the next forward).
  // training: dropout keyed by (seed, step) and FP8 amaxes recorded; !training: no dropout, frozen
  // FP8 scales.
  std::span<const float> forward(std::span<const int32_t> tokens, int batch, bool training, uint64_t step);
  // After forward(training=true): labels [batch] in {0, 1} (any value in [0, 1] works). Returns the
  // mean clipped binary cross-entropy, overwrites every Parameter::grad and moves the FP8 scaling
  // state (one update of the whole table).
  float backward(std::span<const float> labels);

  // The same on tensors on the model's device, queued on context() without waiting (what a captured
  // training step runs): tokens [batch, sequence_length] i32 (ids unchecked on the GPU), labels [batch]
  // f32. The results stay on the device: probabilities() [batch] and, after backward, loss() [1].
  void forward(const Tensor& tokens, bool training);
  void backward(const Tensor& labels);
  // A training step's forward and backward, the loss computed with the probabilities (one op fewer).
  // Lanes may still be busy when it returns (the FP8 scaling update): Context::join_all, which
  // exec::CapturedStep does at a step's end.
  void forward_backward(const Tensor& tokens, const Tensor& labels);
  const Tensor& probabilities() const;
  const Tensor& loss() const;

  // Trainable parameters in a stable order with Keras-like names, views of one flat buffer each for
  // values and gradients (parameter_set()).
  std::vector<nn::Parameter*> parameters();
  nn::ParameterSet& parameter_set();
  // Per FP8 Linear: <layer path>/{inputs,kernel,outputs_grad}_{scale,amax_history}; empty unless Fp8.
  std::vector<nn::StateTensor> fp8_state();
  // The model's FP8 scaling table (null unless Fp8).
  ops::ScalingTable* scaling();

  int64_t parameter_count() const;
  // A table like Keras's model.summary(): layer, output shape, params; totals; the FP8 state size.
  std::string summary() const;
  // Names of the FP8 Linears ("query", "key", "value", "attention_output",
  // "feedforward_intermediate_dense", "feedforward_output_dense", "dense", "dense_1"); empty unless Fp8.
  std::vector<std::string> quantized_layers() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// DESIGN.md's quantize(model, recipe): model.set_precision(Fp8, recipe).
inline void quantize(SeedClassifier& model, const Fp8Recipe& recipe = {}) {
  model.set_precision(nn::Precision::Fp8, recipe);
}

}  // namespace fp8kit::models
