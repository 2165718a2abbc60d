// Llama's MLP (Hugging Face's LlamaMLP): down_proj(silu(gate_proj(x)) * up_proj(x)), no biases. On the
// GPU the gate and up projections run side by side (gate on Main, up on lane A).
#pragma once

#include "nn/linear.h"
#include "ops/context.h"

#include <array>
#include <string>
#include <vector>

namespace fp8kit::nn {

class SwiGluMlp {
 public:
  // name: the HF module ("model.layers.0.mlp"): gate_proj and up_proj [ffn, hidden], down_proj
  // [hidden, ffn].
  SwiGluMlp(ParameterSet& parameters, const std::string& name, int64_t hidden, int64_t ffn);
  void set_precision(Precision precision, ops::ScalingTable* scaling);
  // After the Linears' precisions were set one by one (per-Linear recipes): whether up_proj shares
  // gate_proj's operands of x (ops::shares_input_operands: both bf16, delayed FP8 or block-scaled alike).
  void share_inputs();

  // x: [rows, hidden], unchanged until backward; `next`: what follows down_proj (the residual sum).
  // Returns down_proj's y [rows, hidden].
  const Tensor& forward(ops::Context& c, const Tensor& x, bool training, bool bf16, const ops::LinearOutput& next = {});
  // dy: the gradient of down_proj's output. Returns dx [rows, hidden].
  const Tensor& backward(ops::Context& c, const Tensor& dy);

  std::array<Linear*, 3> linears() { return {&gate_proj, &up_proj, &down_proj}; }
  // The gradient buffers that live only during backward() (see GroupedQueryAttention's).
  std::vector<Tensor*> backward_buffers();
  // What forward() and backward() write besides those and the output's residual sum (see
  // GroupedQueryAttention's).
  std::vector<Tensor*> step_buffers();
  Linear gate_proj, up_proj, down_proj;

 private:
  Tensor act_, dgate_, dup_, dx_;
};

}  // namespace fp8kit::nn
