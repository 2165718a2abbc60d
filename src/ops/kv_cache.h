// The KV cache of Llama inference and the attention ops that use it: kv_append (RoPE on the fused
// projection's q and k, the cache rows written as bf16 or E4M3) and decode_attention (one new query per
// sequence against its cached keys; flash decoding on the GPU). CPU cores: ops/cpu/kv_cache.h; GPU:
// ops/cuda/kv_cache.h.
#pragma once

#include "ops/activation_out.h"
#include "ops/context.h"
#include "tensor/tensor.h"

#include <cstdint>

namespace fp8kit::ops {

// One attention layer's KV cache, contiguous: a sequence per slot.
struct KvCacheLayer {
  Tensor k, v;              // [slots, capacity, kv_heads * head_dim], Bf16 or E4M3 codes
  Tensor k_scale, v_scale;  // E4M3: [kv_heads] f32 on the cache's device, the dequantization multiplier
                            // of each KV head (per tensor: the same value in every entry); Bf16: empty
  int64_t kv_heads = 0, head_dim = 0;
  int64_t slots() const { return k.rank() == 3 ? k.dim(0) : 0; }
  int64_t capacity() const { return k.rank() == 3 ? k.dim(1) : 0; }
  bool fp8() const { return k.dtype() == DType::E4M3; }
};

// A zeroed cache on c's device. dtype Bf16 or E4M3 (then k_scale, v_scale [kv_heads] f32 on c's device
// are required, finite and > 0; checked on the host). head_dim even (RoPE pairs); the GPU ops need a
// multiple of 16, and decode_attention's kernel head_dim 64 or 128.
KvCacheLayer make_kv_cache_layer(Context& c, int64_t slots, int64_t capacity, int64_t kv_heads, int64_t head_dim,
                                 DType dtype, Tensor k_scale = {}, Tensor v_scale = {});

// The attention input step for `rows` tokens: qkv [rows, (heads + 2 kv_heads) * head_dim] bf16 (the fused
// projection's output: q's heads, then k's, then v's); token r sits at position positions[r] of the
// sequence in slot slots[r] (positions, slots: [rows] i32 on c's device; the CPU checks them, the GPU
// does not). q_out [rows, heads * head_dim] bf16 (resized) = RoPE(q) from rope_table (ops/rope.h: the
// same formula as rope_forward on the bf16 values read as float32, products rounded to float32 and no
// FMA, result rounded to bf16). The cache row (slot, position) of k = bf16(RoPE(k)) and of v = v, stored
// as bf16 or, E4M3, as e4m3_saturating_rne(value * (1 / scale of its head)) (numerics' cast; the 1/scale
// computed in float32). k_out, v_out (null: not written) [rows, kv_heads * head_dim] bf16 (resized): the
// values as the cache now holds them (E4M3: float(code) * scale rounded to bf16), so that a prefill's
// attention (ops::sdpa_forward) reads exactly what later decode steps read. Two rows must not write the
// same cache row. The same bits on both devices.
void kv_append(Context& c, const Tensor& rope_table, const Tensor& qkv, const Tensor& positions, const Tensor& slots,
               int64_t heads, KvCacheLayer& cache, Tensor& q_out, Tensor* k_out, Tensor* v_out);

// Decode attention, one new query per sequence: q [batch, heads * head_dim] bf16; sequence b lives in
// slot slots[b] with lengths[b] cached tokens (its new token last; i32 [batch] on c's device; the CPU
// checks 1 <= lengths[b] <= capacity and the slots, the GPU does not: the caller does on the host). out
// [batch, heads * head_dim] bf16 (resized) = softmax(scale * q . k^T) . v over keys 0..lengths[b]-1 of
// its slot; grouped-query: query head h reads KV head h / (heads / kv_heads); E4M3 K/V decoded exactly
// and times their head's scale in float32; scores, softmax and sums in float32; scale 0 means
// 1/sqrt(head_dim). The CPU core is the reference (two-pass softmax); the GPU splits the keys into
// chunks (flash decoding: a block per (sequence, KV head, chunk) reads its keys once for all the query
// heads of the group; partial results in the lane's scratch, then a combine kernel), with a grid that
// depends only on batch and the cache's shape (chunks past a sequence's length exit at once), so a
// captured graph replays for any lengths. The GPU agrees with the CPU within float32 summation order
// (E4M3 on tensor cores: q as f16 times a power of two, each probability as two f16s, float32 sums).
// `out` takes the bf16 result, or its E4M3 codes at a static per-tensor scale (the output projection's
// input, quantized in the same pass; not per row: a token's heads come from different blocks).
void decode_attention(Context& c, const Tensor& q, const KvCacheLayer& cache, const Tensor& slots,
                      const Tensor& lengths, int64_t heads, float scale, const ActivationOut& out);
inline void decode_attention(Context& c, const Tensor& q, const KvCacheLayer& cache, const Tensor& slots,
                             const Tensor& lengths, int64_t heads, float scale, Tensor& out) {
  decode_attention(c, q, cache, slots, lengths, heads, scale, ActivationOut{.bf16 = &out});
}

}  // namespace fp8kit::ops
