// One GPT Transformer layer as Transformer Engine's TransformerLayer computes it by default (pre-LN,
// biases on every projection, causal multi-head self-attention without rotary embeddings, GELU, no
// dropout): h = x + proj(attention(qkv(ln1(x)))), y = h + fc2(gelu(fc1(ln2(h)))). Written once on the
// device-generic layers: the CPU (the reference) or a CUDA GPU, in fp32, mixed bf16 or FP8 (the six
// projections in FP8 with the model's recipe; the LayerNorms, attention core and residual sums in
// bf16, as the Llama's blocks). A layer alone, for its forward and backward (bench/cuda/gpt_layer.cpp).
#pragma once

#include "nn/grouped_query_attention.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/parameter.h"
#include "nn/precision.h"
#include "numerics/recipe.h"
#include "ops/context.h"
#include "ops/scaling_table.h"
#include "tensor/tensor.h"

#include <array>
#include <cstdint>
#include <optional>
#include <vector>

namespace fp8kit::models {

// Transformer Engine's getting-started configuration by default.
struct GptLayerConfig {
  int64_t hidden = 4096, heads = 32, ffn = 16384;
  float layer_norm_eps = 1e-5f;
};

// Forward + backward FLOPs of one layer over batch x seq tokens: the projections' GEMMs (2 m n k each,
// three per projection: fprop, dgrad, wgrad) and the causal attention's matrix products over half of
// the seq x seq matrix (forward two, backward five: 2.5 times the forward, as bench_cuda_sdpa counts).
double gpt_layer_flops(const GptLayerConfig& config, int64_t batch, int64_t seq);

class GptLayer {
 public:
  // Transformer Engine's initialisation: every weight from normal(0, 0.02), biases 0, LayerNorm
  // weights 1 and biases 0, drawn from std::mt19937_64(seed) on the CPU; then on `device`.
  // Parameters (PyTorch's names): ln_1/{gamma,beta}, attn.{q,k,v,o}_proj.{weight,bias},
  // ln_2/{gamma,beta}, mlp.fc1.{weight,bias}, mlp.fc2.{weight,bias}.
  GptLayer(const GptLayerConfig& config, uint64_t seed, Device device = Device::Cpu);

  // Fp8: the projections take FP8 with `recipe` (their state in one scaling table, reset).
  void set_precision(nn::Precision precision, const Fp8Recipe& recipe = {});
  nn::Precision precision() const { return precision_; }
  const GptLayerConfig& config() const { return config_; }
  ops::Context& context() { return context_; }

  // x: [batch * seq, hidden] f32 on the layer's device (batch sequences of seq rows each), unchanged
  // until backward. Queues the forward and returns y [batch * seq, hidden] (bf16 values unless fp32).
  // training: keeps what the backward needs and records FP8 amaxes; otherwise FP8 scales are frozen.
  const Tensor& forward(const Tensor& x, int64_t batch, int64_t seq, bool training);
  // After forward(training=true): dy [batch * seq, hidden] f32, the gradient of y. Overwrites every
  // parameter's gradient, runs the FP8 scaling update, and returns dx [batch * seq, hidden].
  const Tensor& backward(const Tensor& dy);

  nn::ParameterSet& parameter_set() { return parameters_; }
  std::vector<nn::Parameter*> parameters() { return parameters_.parameters(); }
  ops::ScalingTable* scaling() { return scaling_ ? &*scaling_ : nullptr; }
  // Per FP8 Linear: <module>/{inputs,kernel,outputs_grad}_{scale,amax_history}; empty unless Fp8.
  std::vector<nn::StateTensor> fp8_state();

 private:
  bool bf16() const { return precision_ != nn::Precision::Fp32; }
  std::array<nn::Linear*, 6> linears();

  GptLayerConfig config_;
  ops::Context context_;
  nn::ParameterSet parameters_;
  nn::LayerNorm ln1_;
  nn::GroupedQueryAttention attention_;
  nn::LayerNorm ln2_;
  nn::Linear fc1_, fc2_;
  nn::Precision precision_ = nn::Precision::Fp32;
  std::optional<ops::ScalingTable> scaling_;  // Fp8 only
  int64_t rows_ = 0;
  bool trained_forward_ = false;
  Tensor mid_, out_;  // the residual stream after the attention and after the MLP, [rows, hidden]
  Tensor d_mid_, dx_;
};

}  // namespace fp8kit::models
