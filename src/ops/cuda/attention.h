// Causal multi-head self-attention core on the GPU, ops/attention.h's semantics: scores = (q /
// sqrt(head_dim)) k^T over keys j <= i only (the -1e9 mask's exp is exactly 0, so masked keys are
// skipped), softmax, dropout on the probabilities, out = dropped_probs v; bf16 rounding points as the
// CPU. Instead of saving probs [batch, heads, seq, seq], the forward saves each row's softmax max and
// sum and the backward recomputes the probabilities bit for bit. Device pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/attention.h"
#include "ops/cuda/dropout.h"

namespace fp8kit::cuda {

// q, k, v, out: [batch, seq, heads * head_dim]; stats: [batch, heads, seq, 2] (row max, row sum).
// The dropout element index of probability (b, h, i, j) is ((b * heads + h) * seq + i) * seq + j, as
// on the CPU. head_dim must be 16, 32 or 64 and seq <= 1024, and a block's tiles (about
// (2 head_dim + 72) x seq floats in the backward) must fit in the GPU's shared memory per block: on
// Hopper (227 KB) seq <= 544, 416, 288 for head_dim 16, 32, 64; larger shapes throw.
void causal_attention_forward(const ops::AttentionShape& shape, const float* q, const float* k, const float* v,
                              const DropoutSite& dropout, bool bf16, float* stats, float* out, cudaStream_t stream);
// dq, dk, dv overwritten (float32 math), from the forward's inputs and stats. workspace: device
// scratch of causal_attention_backward_workspace(shape) bytes, two floats per pair j <= i of each
// head: 4 x batch x heads x seq x (seq + 1) bytes, at most 32 MB (more heads run in several launches).
// Queues work only (no allocation), so it can be captured in a CUDA graph.
void causal_attention_backward(const ops::AttentionShape& shape, const float* q, const float* k, const float* v,
                               const float* stats, const DropoutSite& dropout, bool bf16, const float* dout,
                               float* dq, float* dk, float* dv, void* workspace, size_t workspace_bytes,
                               cudaStream_t stream);
size_t causal_attention_backward_workspace(const ops::AttentionShape& shape);

}  // namespace fp8kit::cuda
