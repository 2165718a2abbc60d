// Grouped-query SDPA's CPU core (ops/sdpa.h's reference): flash-attention tiles of 64 queries x 64
// keys with an online softmax in float32, never the [seq, seq] matrix. Threaded over independent
// tiles, each summed in a fixed order: the bits do not depend on the thread count.
#pragma once

#include "ops/sdpa.h"

namespace fp8kit::ops::cpu {

// T: float, or uint16_t for bf16 bits (read as floats, written rounded to nearest even). Layouts as
// in ops/sdpa.h; s.scale must be resolved (non-zero). bf16_out rounds float outputs to bf16 values.
// lengths: [batch] tokens per sequence, each in [1, s.seq], or null (every sequence s.seq long).
template <typename T>
void sdpa_forward(const SdpaShape& s, const T* q, const T* k, const T* v, bool bf16_out, T* out, float* lse,
                  const int32_t* lengths = nullptr);

// FlashAttention-2's backward from the forward's lse: D = rowsum(dout * out), P = exp(scale q.k - lse),
// dS = P (dout.v - D). Two passes, so that every gradient is summed by one task: dq per query tile,
// then dk and dv per key tile (over the query heads of its kv group).
template <typename T>
void sdpa_backward(const SdpaShape& s, const T* q, const T* k, const T* v, const T* out, const float* lse,
                   const T* dout, T* dq, T* dk, T* dv);

}  // namespace fp8kit::ops::cpu
