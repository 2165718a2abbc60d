// Causal multi-head self-attention (Keras MultiHeadAttention with use_causal_mask, as KerasHub's
// TransformerDecoder calls it): query/key/value projections to heads x head_dim, the causal core
// of ops/attention.h with dropout on the probabilities, and the output projection. On the GPU the
// three projections run side by side (query on Main, key and value on lanes A and B).
#pragma once

#include "nn/linear.h"
#include "ops/context.h"
#include "ops/dropout.h"

#include <array>
#include <string>

namespace fp8kit::nn {

class CausalSelfAttention {
 public:
  // path: "transformer_decoder/self_attention"; sublayers query, key, value (kernel
  // {hidden, heads, head_dim}) and attention_output (kernel {heads, head_dim, hidden}).
  CausalSelfAttention(ParameterSet& parameters, const std::string& path, int64_t hidden, int64_t heads,
                      int64_t head_dim);

  void set_precision(Precision precision, ops::ScalingTable* scaling);

  // x: [batch, seq, hidden], unchanged until backward. `probabilities`: the dropout on the attention
  // probabilities; `next`: what follows the output projection (its dropout and residual sum).
  // Returns the output projection's y [batch * seq, hidden].
  const Tensor& forward(ops::Context& c, const Tensor& x, int64_t batch, int64_t seq, bool training, bool bf16,
                        const ops::DropoutSpec& probabilities, const ops::LinearOutput& next = {});
  // dy: the gradient of the output projection's y, or, with an active `dropout`, of the dropout after
  // it. The gradient of x is the sum of input_gradients() (left to the caller, to fuse it with what
  // it adds them to).
  void backward(ops::Context& c, const Tensor& dy, const ops::DropoutSpec& dropout = {});
  // query's, key's and value's dx [batch * seq, hidden] after backward().
  std::array<const Tensor*, 3> input_gradients();

  std::array<Linear*, 4> linears() { return {&query, &key, &value, &output}; }

  Linear query, key, value, output;

 private:
  int64_t heads_, head_dim_;
  int64_t batch_ = 0, seq_ = 0;
  bool bf16_ = false;
  ops::DropoutSpec probabilities_{};
  Tensor q_, k_, v_;  // views of the projections' outputs as [batch, seq, channels]
  Tensor saved_, context_, dq_, dk_, dv_;
};

}  // namespace fp8kit::nn
