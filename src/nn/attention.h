// Causal multi-head self-attention (Keras MultiHeadAttention with use_causal_mask, as KerasHub's
// TransformerDecoder calls it): query/key/value projections to heads x head_dim, the causal core
// of ops/attention.h with dropout on the probabilities, and the output projection.
#pragma once

#include "nn/linear.h"
#include "ops/dropout.h"
#include "tensor/tensor.h"

#include <cstdint>
#include <optional>
#include <span>
#include <string>

namespace fp8kit::nn {

class CausalSelfAttention {
 public:
  // path: "transformer_decoder/self_attention"; sublayers query, key, value (kernel
  // {hidden, heads, head_dim}) and attention_output (kernel {heads, head_dim, hidden}).
  CausalSelfAttention(std::string path, int64_t hidden, int64_t heads, int64_t head_dim, float dropout,
                      uint32_t dropout_site);

  void set_precision(Precision precision, const Fp8Recipe& recipe = {});

  // x: [batch, seq, hidden], valid until backward. Returns [batch, seq, hidden].
  std::span<const float> forward(std::span<const float> x, int64_t batch, int64_t seq, bool training, uint64_t seed,
                                 uint64_t step);
  std::span<const float> backward(std::span<const float> dout);

  Linear query, key, value, output;
  // [batch, heads, seq, seq] softmax of the last forward (upper triangle 0).
  const Tensor& probabilities() const { return probs_; }

 private:
  int64_t hidden_, heads_, head_dim_;
  float dropout_;
  uint32_t site_;
  bool bf16_ = false;
  int64_t batch_ = 0, seq_ = 0;
  std::optional<ops::DropoutMask> mask_;
  std::span<const float> q_, k_, v_;
  Tensor probs_, context_, dq_, dk_, dv_, dx_;
};

}  // namespace fp8kit::nn
