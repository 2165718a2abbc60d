// The KV cache's CPU cores on raw arrays: the exact reference of ops/kv_cache.h's kv_append and
// decode_attention (bf16 as uint16 bits, E4M3 as codes).
#pragma once

#include <cstdint>

namespace fp8kit::ops::cpu {

// A cache [slots, capacity, kv_heads * head_dim] and the query heads that read it (kv_heads divides heads).
struct KvShape {
  int64_t heads, kv_heads, head_dim, slots, capacity;
};

// The cache's storage: k, v bf16 bits (uint16_t) or, with scales, E4M3 codes (uint8_t); k_scale,
// v_scale [kv_heads] the dequantization multipliers (null: bf16).
struct KvData {
  void* k;
  void* v;
  const float* k_scale;
  const float* v_scale;
};
// The same, read only (decode_attention).
struct KvConstData {
  const void* k;
  const void* v;
  const float* k_scale;
  const float* v_scale;
};

// qkv [rows, (heads + 2 kv_heads) * head_dim] bf16; token r at positions[r] of slot slots[r] (both
// valid); table [positions, head_dim / 2, 2] (ops::rope_table). q_out [rows, heads * head_dim];
// k_out, v_out [rows, kv_heads * head_dim] or null.
void kv_append(const KvShape& s, int64_t rows, const float* table, const uint16_t* qkv, const int32_t* positions,
               const int32_t* slots, const KvData& cache, uint16_t* q_out, uint16_t* k_out, uint16_t* v_out);

// q, out [batch, heads * head_dim] bf16; sequence b in slot slots[b] with lengths[b] keys (1 <=
// lengths[b] <= capacity). Scores, a two-pass softmax and the sums in float32, in key order.
void decode_attention(const KvShape& s, int64_t batch, const uint16_t* q, const KvConstData& cache, const int32_t* slots,
                      const int32_t* lengths, float scale, uint16_t* out);

}  // namespace fp8kit::ops::cpu
