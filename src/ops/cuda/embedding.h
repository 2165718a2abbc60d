// Token + position embedding on the GPU (ops/embedding.h's CPU cores): gather forward, scatter-add
// backward in the CPU layer's order. All pointers are device pointers; tokens [batch, seq] int32 ids in
// [0, vocabulary).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "ops/cuda/dropout.h"

namespace fp8kit::cuda {

struct EmbeddingShape {
  int64_t batch, seq, dim, vocabulary;
};

// out[b, t, :] = dropout_forward(token[tokens[b, t], :] + position[t, :]); bf16: the sum is
// bf16(bf16(token) + bf16(position)) and dropout rounds as in bf16. position null: no position table
// (the token row alone, bf16(token)) (ops::dropout_forward's values,
// elements indexed over [batch, seq, dim]; an inactive site: the sum itself). Ids outside the
// vocabulary are not checked here (the caller validates them on the host).
void embedding_forward(const EmbeddingShape& shape, const int32_t* tokens, const float* token, const float* position,
                       bool bf16, const DropoutSite& dropout, float* out, cudaStream_t stream);
// token_grad [vocabulary, dim] and position_grad [seq, dim] (null: none) overwritten with the scatter-sums of dout
// [batch, seq, dim], each added in batch-position order as the CPU's embedding_scatter does:
// bit-identical to the CPU, the same bits every run (rows of absent ids are zero; ids unchecked as in
// the forward). workspace: device scratch of embedding_backward_workspace(shape) bytes (which asks CUB,
// so it needs a device), 256-byte aligned. Queues work only (no allocation, no synchronisation), so it
// can be captured in a CUDA graph.
void embedding_backward(const EmbeddingShape& shape, const int32_t* tokens, const float* dout, float* token_grad,
                        float* position_grad, void* workspace, size_t workspace_bytes, cudaStream_t stream);
size_t embedding_backward_workspace(const EmbeddingShape& shape);
// embedding_backward in two halves (the same kernels), the first needing only the token ids, so that
// it can run early on another stream: _sort zeroes token_grad and sorts the ids into the workspace;
// _sums, queued after it on the same workspace, writes position_grad and token_grad's rows.
void embedding_backward_sort(const EmbeddingShape& shape, const int32_t* tokens, float* token_grad, void* workspace,
                             size_t workspace_bytes, cudaStream_t stream);
void embedding_backward_sums(const EmbeddingShape& shape, const float* dout, float* token_grad, float* position_grad,
                             void* workspace, size_t workspace_bytes, cudaStream_t stream);

// out row r (row_bytes bytes) = table row ids[r] of table [n rows]; an id outside [0, n) gives a row of
// zeros (the ids are not read on the host: the caller checks them). A block per row, 16-byte copies
// where the rows allow.
void gather_rows(int64_t rows, int64_t n, int64_t row_bytes, const std::byte* table, const int32_t* ids,
                 std::byte* out, cudaStream_t stream);

}  // namespace fp8kit::cuda
