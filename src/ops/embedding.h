// Token + position embedding (KerasHub TokenAndPositionEmbedding) on Tensors, on either device:
// out[b, t] = dropout(token[id[b, t]] + position[t]); mixed bf16: both rows rounded to bf16 and their
// sum rounded to bf16 (Keras autocasts the variables), then dropout rounds as ops::dropout_forward.
// An empty position table (numel 0: Llama's, which has none) makes it a token embedding only:
// out[b, t] = dropout(token[id[b, t]]) (bf16: the token row rounded to bf16).
// The backward scatter-adds into dense gradients, every element summed in batch-position order, so
// the CPU and the GPU give the same bits.
#pragma once

#include "ops/context.h"
#include "ops/dropout.h"
#include "tensor/tensor.h"

#include <cstdint>
#include <span>

namespace fp8kit::ops {

// The CPU cores (the op below runs them on the CPU). tokens: [batch, seq] ids, each in
// [0, vocabulary) with vocabulary = token_table.size() / dim (else throws, naming the id and its
// position); token_table [vocabulary, dim], position_table [seq, dim] or empty, out [batch, seq, dim].
void embedding_gather(std::span<const int32_t> tokens, int64_t seq, int64_t dim, std::span<const float> token_table,
                      std::span<const float> position_table, bool bf16, std::span<float> out);
// token_grad [vocabulary, dim] and position_grad [seq, dim] (or empty: no position table) overwritten
// with the sums of dout [batch, seq, dim] over the rows that used them (rows of absent ids zero). Ids
// checked as above.
void embedding_scatter(std::span<const int32_t> tokens, int64_t seq, int64_t dim, std::span<const float> dout,
                       std::span<float> token_grad, std::span<float> position_grad);

// tokens [B, T] i32; token_table [V, D], position_table [T, D] f32 or empty (numel 0, e.g. a default
// Tensor(): no position embedding); out [B, T, D] f32 (resized; a
// default Tensor() becomes one), with the dropout of `dropout` fused (elements indexed over [B, T, D]).
// Ids outside [0, V) throw on the CPU; the GPU kernel does not read the ids on the host, so on a
// CUDA context the caller validates them on the host (where they come from) before uploading.
void embedding_forward(Context& c, const Tensor& tokens, const Tensor& token_table, const Tensor& position_table,
                       bool bf16, const DropoutSpec& dropout, Tensor& out);

// The backward in two calls, so that the first, which needs only the ids, can run early on another
// lane (e.g. Lane::Side from the start of the step). dout is the gradient of the sum before dropout
// (the caller applies dropout_backward, or fuses it into the residual gradient as the GPU model does).
//   embedding_backward_sort: token_grad [V, D] f32 (the parameter's gradient, shaped). GPU: zeroes
//     token_grad and sorts the ids into `workspace`, which it resizes (a default Tensor() becomes an
//     i32 tensor on the context's device; it is sized by the first call, so a captured step reuses
//     it). CPU: checks the arguments only.
//   embedding_backward_sums, queued after _sort (across lanes: join/fork so that it waits for it) on
//     the same tokens and workspace, which must live until it has run: position_grad [T, D] (empty:
//     no position table, left alone) and
//     token_grad's rows overwritten with the scatter-sums of dout [B, T, D], bit-identical to
//     embedding_scatter on both devices.
void embedding_backward_sort(Context& c, const Tensor& tokens, Tensor& token_grad, Tensor& workspace);
void embedding_backward_sums(Context& c, const Tensor& tokens, const Tensor& dout, Tensor& token_grad,
                             Tensor& position_grad, Tensor& workspace);

// out [rows, dim] (resized; table's dtype) = table [n, dim] (bf16 or f32) rows ids [rows] (i32): token
// embeddings (a bf16 table), or each sequence's last hidden row. Ids outside [0, n) throw on the CPU;
// the GPU does not read them on the host (the caller checks them where they come from) and writes a
// row of zeros for one.
void gather_rows(Context& c, const Tensor& table, const Tensor& ids, Tensor& out);

}  // namespace fp8kit::ops
