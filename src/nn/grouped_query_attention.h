// Llama's self-attention (Hugging Face's LlamaAttention): query, key and value projections (no bias)
// to `heads` query heads and `kv_heads` key/value heads of head_dim, rotary position embeddings on
// queries and keys, causal grouped-query attention (ops/sdpa.h), and the output projection. With
// biases on the four projections and no rotary embeddings it is GPT's (and Transformer Engine's
// TransformerLayer's) multi-head attention, kv_heads = heads. On the GPU the three projections run
// side by side (query on Main, key and value on lanes A and B), and in bf16 the attention's operands
// and gradients are bf16 tensors, as cuDNN reads and writes them (ops::sdpa_dtype).
#pragma once

#include "nn/linear.h"
#include "ops/context.h"
#include "ops/sdpa.h"

#include <array>
#include <string>
#include <vector>

namespace fp8kit::nn {

class GroupedQueryAttention {
 public:
  // name: the HF module ("model.layers.0.self_attn"): q_proj [heads * head_dim, hidden], k_proj and
  // v_proj [kv_heads * head_dim, hidden], o_proj [hidden, heads * head_dim]; with `bias`, each also
  // <proj>.bias [out].
  GroupedQueryAttention(ParameterSet& parameters, const std::string& name, int64_t hidden, int64_t heads,
                        int64_t kv_heads, int64_t head_dim, bool bias = false);
  void set_precision(Precision precision, ops::ScalingTable* scaling);
  // The attention's forward in FP8 (ops::SdpaShape::fp8; its backward stays bf16), whatever the
  // Linears' precision.
  void set_fp8_attention(bool fp8) { shape_.fp8 = fp8; }
  bool fp8_attention() const { return shape_.fp8; }
  // After the Linears' precisions were set one by one (per-Linear recipes): which share q_proj's
  // operands of x (ops::shares_input_operands: bf16, delayed FP8 or block-scaled as q_proj is).
  void share_inputs();

  // x: [batch * seq, hidden], unchanged until backward; rope: the model's table (ops/rope.h), or null:
  // no rotary embeddings. `next`: what follows the output projection (the residual sum). Returns
  // o_proj's y [batch * seq, hidden].
  const Tensor& forward(ops::Context& c, const Tensor& x, int64_t batch, int64_t seq, const Tensor* rope,
                        bool training, bool bf16, const ops::LinearOutput& next = {});
  // dy: the gradient of o_proj's output. Returns dx [batch * seq, hidden]; the projections'
  // gradients are overwritten.
  const Tensor& backward(ops::Context& c, const Tensor& dy);

  std::array<Linear*, 4> linears() { return {&q_proj, &k_proj, &v_proj, &o_proj}; }
  // The gradient buffers that live only during backward() (a model may lend the same ones to every
  // layer in turn: they are sized by the first backward).
  std::vector<Tensor*> backward_buffers();
  // What forward() and backward() write besides those and the output's residual sum (activations,
  // the projections' step_buffers), for a model that recomputes activations to share.
  std::vector<Tensor*> step_buffers();
  Linear q_proj, k_proj, v_proj, o_proj;

 private:
  ops::SdpaShape shape_;
  const Tensor* rope_ = nullptr;
  bool bf16_ = false;
  // SDPA's operands, of ops::sdpa_dtype: the projections (q and k after RoPE, if any; views of the
  // projections' outputs where nothing changes them) as [batch, seq, channels], and its out (o_proj's
  // input as it is).
  Tensor q_, k_, v_, out_, lse_;
  // The backward's: o_proj's dx as SDPA's dout when that is bf16; SDPA's gradients (its dtype, the
  // projections' output gradients), and RoPE's f32 backward of dq_ and dk_ when those are bf16.
  Tensor dout_, dq_, dk_, dv_, dq_f32_, dk_f32_, dx_;
};

}  // namespace fp8kit::nn
