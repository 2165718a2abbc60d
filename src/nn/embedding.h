// Token embeddings: KerasHub's TokenAndPositionEmbedding, out[b, t] = token[id[b, t]] + position[t]
// (mixed bf16: both rows rounded to bf16, their sum rounded to bf16, as Keras autocasts the
// variables), and Hugging Face's nn.Embedding, out[b, t] = weight[id[b, t]].
#pragma once

#include "nn/parameter.h"
#include "ops/context.h"
#include "ops/dropout.h"

#include <string>

namespace fp8kit::nn {

class TokenAndPositionEmbedding {
 public:
  TokenAndPositionEmbedding(ParameterSet& parameters, const std::string& path, int64_t vocabulary_size,
                            int64_t sequence_length, int64_t dim);

  // tokens: [batch, sequence_length] i32 ids in [0, vocabulary_size) on the model's device, unchanged
  // until backward (the caller validates ids on the host: the GPU does not check them). Returns
  // dropout([batch, sequence_length, dim]).
  const Tensor& forward(ops::Context& c, const Tensor& tokens, bool bf16, const ops::DropoutSpec& dropout);
  // The first half of the backward, which needs only the ids: queue it early (e.g. on a lane of its
  // own, from the step's start).
  void prepare_backward(ops::Context& c, const Tensor& tokens);
  // Overwrites both grads from dout [batch, sequence_length, dim] (after prepare_backward, on any
  // lane: it waits for that half): the token grad is dense (zero except the rows used), as Keras's
  // dense Adam update expects.
  void backward(ops::Context& c, const Tensor& dout);

  Parameter& token;     // [vocabulary_size, dim]
  Parameter& position;  // [sequence_length, dim]

 private:
  const Tensor* tokens_ = nullptr;
  Tensor out_, workspace_;
  ops::Context::Marker sorted_;  // the end of prepare_backward's work
};

// HF's token embedding (model.embed_tokens): the embedding op without a position table.
class Embedding {
 public:
  // name: "model.embed_tokens"; the parameter is <name>.weight [vocabulary_size, dim].
  Embedding(ParameterSet& parameters, const std::string& name, int64_t vocabulary_size, int64_t dim);

  // tokens: [batch, seq] i32 ids (validated by the caller on the host) on the model's device,
  // unchanged until backward. Returns [batch, seq, dim] (bf16: the rows rounded to bf16).
  const Tensor& forward(ops::Context& c, const Tensor& tokens, bool bf16);
  // The weight's gradient overwritten (dense: zero except the rows used) from dout [batch, seq, dim].
  void backward(ops::Context& c, const Tensor& dout);

  Parameter& weight;

 private:
  const Tensor* tokens_ = nullptr;
  Tensor out_, no_positions_, workspace_;
};

}  // namespace fp8kit::nn
