// Token + position embedding (KerasHub TokenAndPositionEmbedding): out[b, t] = token[id[b, t]] + position[t].
// Mixed bf16: both rows rounded to bf16, their sum rounded to bf16 (Keras autocasts the variables).
#pragma once

#include "nn/parameter.h"
#include "tensor/tensor.h"

#include <cstdint>
#include <span>
#include <string>

namespace fp8kit::nn {

class TokenAndPositionEmbedding {
 public:
  TokenAndPositionEmbedding(std::string path, int64_t vocabulary_size, int64_t sequence_length, int64_t dim);

  // tokens: [batch, sequence_length] ids in [0, vocabulary_size) (else throws). Returns
  // [batch, sequence_length, dim], valid until the next forward.
  std::span<const float> forward(std::span<const int32_t> tokens, int64_t batch, bool bf16);
  // Overwrites both grads: the token grad is dense (zero except the rows used), as Keras's dense
  // Adam update expects; the position grad sums over the batch.
  void backward(std::span<const float> dout);

  Parameter token, position;  // [vocabulary_size, dim], [sequence_length, dim]

 private:
  int64_t sequence_length_, dim_;
  Tensor tokens_;  // [batch, sequence_length] copy of the ids, for the backward
  int64_t batch_ = 0;
  Tensor out_;
};

}  // namespace fp8kit::nn
