// Token + position embedding on the GPU (nn::TokenAndPositionEmbedding): gather forward, scatter-add
// backward. All pointers are device pointers; tokens [batch, seq] int32 ids in [0, vocabulary).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fp8kit::cuda {

struct EmbeddingShape {
  int64_t batch, seq, dim, vocabulary;
};

// out[b, t, :] = token[tokens[b, t], :] + position[t, :]; bf16: bf16(bf16(token) + bf16(position)).
// Ids outside the vocabulary are not checked here (the caller validates them on the host).
void embedding_forward(const EmbeddingShape& shape, const int32_t* tokens, const float* token, const float* position,
                       bool bf16, float* out, cudaStream_t stream);
// token_grad [vocabulary, dim] and position_grad [seq, dim] overwritten with the scatter-sums of dout
// [batch, seq, dim] (float atomics: the order of the additions, hence the last bits, may vary).
void embedding_backward(const EmbeddingShape& shape, const int32_t* tokens, const float* dout, float* token_grad,
                        float* position_grad, cudaStream_t stream);

}  // namespace fp8kit::cuda
