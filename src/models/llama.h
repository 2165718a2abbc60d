// A decoder-only language model of the Llama architecture as Hugging Face's LlamaForCausalLM defines
// it: token embedding, blocks of (RMSNorm, grouped-query self-attention with rotary embeddings,
// residual, RMSNorm, SwiGLU MLP, residual), a final RMSNorm and the LM head (tied to the embedding or
// not), no biases. Written once on the device-generic layers: it runs on the CPU (the reference) or a
// CUDA GPU, in fp32, mixed bf16 or FP8 (the seven projections of every block in FP8; the embedding,
// norms, attention core and LM head in bf16, the pipeline seed's policy; per-Linear recipes change
// any Linear's).
#pragma once

#include "models/llama_config.h"
#include "nn/linear.h"
#include "nn/linear_recipe.h"
#include "nn/parameter.h"
#include "nn/precision.h"
#include "numerics/recipe.h"
#include "ops/context.h"
#include "ops/scaling_table.h"
#include "tensor/tensor.h"

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace fp8kit::models {

// How a training step trades time for memory; neither changes what it computes (see each).
struct LlamaMemoryOptions {
  // Rows of the LM head and the cross-entropy a training step takes at a time: their [rows, vocab]
  // f32 logits, their gradient and its GEMM operands live for one chunk, not the whole micro-batch.
  // 0: default_loss_chunk_rows(vocab). At least batch * seq: one pass, as forward() then backward()
  // without chunks. The losses and gradients are those of one pass within float32 rounding: a GEMM's
  // rows may round differently in their last bit with its row count (OpenBLAS's edge kernels,
  // cuBLASLt's choice of algorithm), and the head weight's gradient is the chunks' sum.
  int64_t loss_chunk_rows = 0;
  // Activation recomputation: the blocks' activations and GEMM operands live in one set of buffers
  // that every block borrows in turn, only the blocks' outputs (the residual stream) are kept, and
  // the backward runs each block's forward again from its saved input before its backward: about one
  // block's activations instead of all of them, for about a third more compute. Gradients are the same
  // bits; FP8 casts in the recomputed forward use the step's scales and record nothing (ScalingTable's
  // replaying), so the scaling state moves once per step as without it.
  bool recompute = false;
};

// Chunks of about 64 MiB of f32 logits (whole multiples of 128 rows, at least 256 rows).
int64_t default_loss_chunk_rows(int64_t vocab_size);

// Where data-parallel training (train/lm_trainer.cpp) joins a backward, called while it is queued.
struct BackwardHooks {
  // The parameters [begin, end) of parameters()'s order have their final gradients of this backward
  // once the work queued so far, on every lane, is done (Context::follow_all). Called as the backward
  // reaches them (the LM head's and the final norm's, each block's from the last, the embedding's):
  // every parameter once per backward.
  std::function<void(ops::Context&, size_t begin, size_t end)> gradients_final;
  // Before the FP8 scaling update, on Main with every lane joined: what it queues on Main comes before
  // the update reads the table's amaxes().
  std::function<void(ops::Context&, ops::ScalingTable&)> before_scaling_update;
};

class Llama {
 public:
  // Hugging Face's initialisation: every Linear and the embedding from normal(0, 0.02) (the config's
  // initializer range), norms 1, drawn from std::mt19937_64(seed) on the CPU; then on `device`.
  Llama(const LlamaConfig& config, uint64_t seed, Device device = Device::Cpu);
  ~Llama();
  Llama(Llama&&) noexcept;
  Llama& operator=(Llama&&) noexcept;

  // Fp8: the blocks' projections take FP8 with `recipe` (their state in one scaling table, reset);
  // everything else runs as mixed bf16. Then `linears` overrides the precision of the Linears it
  // matches by module path ("lm_head", "model.layers.0.mlp.down_proj"): any may run fp32, bf16 or FP8
  // (the recipe's mode or delayed, current or block, with the recipe's other fields) whatever
  // `precision` is, which still decides the rest of the model. Throws naming a rule that matches no
  // Linear. Weights are untouched.
  void set_precision(nn::Precision precision, const Fp8Recipe& recipe = {}, const nn::LinearRecipes& linears = {});
  nn::Precision precision() const;
  // The blocks' attention forward in FP8 (ops::SdpaShape::fp8: Transformer Engine's FP8 attention,
  // its backward bf16), whatever the precision, from the next forward; off by default.
  void set_fp8_attention(bool fp8);
  bool fp8_attention() const;
  // For the training steps from now on (the next forward).
  void set_memory_options(const LlamaMemoryOptions& options);
  const LlamaMemoryOptions& memory_options() const;
  const LlamaConfig& config() const;
  Device device() const;
  ops::Context& context();

  // tokens: [batch, seq] i32 on the model's device, seq <= max_position_embeddings, ids in
  // [0, vocab_size) (checked by the caller on the host: the GPU does not). Queues the forward and
  // returns the logits [batch * seq, vocab_size] f32 (bf16 values unless fp32). training: keeps what
  // the backward needs and records FP8 amaxes; otherwise FP8 scales are frozen. A training forward
  // whose rows exceed the memory options' loss chunk leaves the LM head to backward() and returns an
  // empty tensor.
  const Tensor& forward(const Tensor& tokens, bool training);
  // After forward: losses [batch * seq] f32 (resized; on the model's device) = each position's
  // next-token cross-entropy against targets [batch * seq] i32 (negative: ignored).
  void loss(const Tensor& targets, Tensor& losses);
  // forward(tokens, false) and loss(targets, losses) with the LM head in the memory options' loss
  // chunks: no [batch * seq, vocab] logits (the same losses within float32 rounding; forward()'s
  // logits are not made).
  void evaluate(const Tensor& tokens, const Tensor& targets, Tensor& losses);
  // After forward(training=true): the losses as loss(), then every gradient overwritten with the
  // gradient of grad_scale * sum(losses) (grad_scale = 1 / counted tokens of the whole step for a
  // mean), then the FP8 scaling update. The logits are overwritten by their gradient.
  void backward(const Tensor& targets, float grad_scale, Tensor& losses, const BackwardHooks& hooks = {});

  nn::ParameterSet& parameter_set();
  std::vector<nn::Parameter*> parameters();
  // Every Linear: the blocks' projections in order, then the LM head.
  std::vector<nn::Linear*> linears();
  // Per FP8 Linear with per-tensor scales: <module>/{inputs,kernel,outputs_grad}_{scale,amax_history};
  // empty when there is none.
  std::vector<nn::StateTensor> fp8_state();
  ops::ScalingTable* scaling();
  int64_t parameter_count() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp8kit::models
