// TokenAndPositionEmbedding on the embedding ops.
#include "nn/embedding.h"

#include "ops/embedding.h"
#include "ops/tensor_checks.h"

namespace fp8kit::nn {

TokenAndPositionEmbedding::TokenAndPositionEmbedding(ParameterSet& parameters, const std::string& path,
                                                     int64_t vocabulary_size, int64_t sequence_length, int64_t dim)
    : token(parameters.add(path + "/token_embedding/embeddings", {vocabulary_size, dim})),
      position(parameters.add(path + "/position_embedding/embeddings", {sequence_length, dim})) {}

const Tensor& TokenAndPositionEmbedding::forward(ops::Context& c, const Tensor& tokens, bool bf16,
                                                 const ops::DropoutSpec& dropout) {
  tokens_ = &tokens;
  ops::embedding_forward(c, tokens, token.value, position.value, bf16, dropout, out_);
  return out_;
}

void TokenAndPositionEmbedding::prepare_backward(ops::Context& c, const Tensor& tokens) {
  ops::embedding_backward_sort(c, tokens, token.grad, workspace_);
  c.record(sorted_);
}

void TokenAndPositionEmbedding::backward(ops::Context& c, const Tensor& dout) {
  c.wait(sorted_);
  ops::embedding_backward_sums(c, *tokens_, dout, token.grad, position.grad, workspace_);
}

Embedding::Embedding(ParameterSet& parameters, const std::string& name, int64_t vocabulary_size, int64_t dim)
    : weight(parameters.add(name + ".weight", {vocabulary_size, dim})) {}

const Tensor& Embedding::forward(ops::Context& c, const Tensor& tokens, bool bf16) {
  tokens_ = &tokens;
  ops::sized(no_positions_, {0, weight.shape[1]}, DType::F32, c.device());
  ops::embedding_forward(c, tokens, weight.value, no_positions_, bf16, {}, out_);
  return out_;
}

void Embedding::backward(ops::Context& c, const Tensor& dout) {
  ops::embedding_backward_sort(c, *tokens_, weight.grad, workspace_);
  ops::embedding_backward_sums(c, *tokens_, dout, weight.grad, no_positions_, workspace_);
}

}  // namespace fp8kit::nn
