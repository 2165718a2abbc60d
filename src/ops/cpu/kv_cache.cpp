// The KV cache on the CPU: RoPE and the cache writes of kv_append, and decode attention with a
// two-pass float32 softmax, threaded over tokens / (sequence, head) pairs.
#include "ops/cpu/kv_cache.h"

#include "numerics/cast.h"
#include "ops/rope_pair.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace fp8kit::ops::cpu {

namespace {

// Writes n values (bf16-exact floats) into a cache row as bf16 bits or, with a scale, as E4M3 codes of
// value * (1 / scale); out (null: none) gets the bf16 of what the row now holds.
void store_row(const float* values, int64_t n, void* row, const float* scale, uint16_t* out) {
  if (scale == nullptr) {
    auto* bits = static_cast<uint16_t*>(row);
    for (int64_t i = 0; i < n; ++i) {
      bits[i] = float_to_bf16(values[i]);
      if (out != nullptr) out[i] = bits[i];
    }
    return;
  }
  auto* codes = static_cast<uint8_t*>(row);
  const float inverse = 1.0f / *scale;
  for (int64_t i = 0; i < n; ++i) {
    codes[i] = encode_fp8<Fp8Format::E4M3>(values[i] * inverse);
    if (out != nullptr) out[i] = float_to_bf16(decode_fp8<Fp8Format::E4M3>(codes[i]) * *scale);
  }
}

// Element i of cache row `index` (of `width` elements) as float32: bf16, or E4M3 code times scale.
float cached(const void* data, int64_t index, int64_t width, int64_t i, const float* scale) {
  if (scale == nullptr) return bf16_to_float(static_cast<const uint16_t*>(data)[index * width + i]);
  return decode_fp8<Fp8Format::E4M3>(static_cast<const uint8_t*>(data)[index * width + i]) * *scale;
}

}  // namespace

void kv_append(const KvShape& s, int64_t rows, const float* table, const uint16_t* qkv, const int32_t* positions,
               const int32_t* slots, const KvData& cache, uint16_t* q_out, uint16_t* k_out, uint16_t* v_out) {
  const int64_t d = s.head_dim, half = d / 2, kv_width = s.kv_heads * d;
  const int64_t width = (s.heads + 2 * s.kv_heads) * d;
  const bool fp8 = cache.k_scale != nullptr;
  const size_t element = fp8 ? 1 : 2;
#pragma omp parallel for schedule(static) if (rows * width >= 65536)
  for (int64_t r = 0; r < rows; ++r) {
    const float* angles = table + static_cast<int64_t>(positions[r]) * half * 2;
    const int64_t cache_row = static_cast<int64_t>(slots[r]) * s.capacity + positions[r];
    std::vector<float> head(static_cast<size_t>(d));
    for (int64_t h = 0; h < s.heads + 2 * s.kv_heads; ++h) {
      const uint16_t* x = qkv + r * width + h * d;
      for (int64_t i = 0; i < d; ++i) head[i] = bf16_to_float(x[i]);
      if (h < s.heads + s.kv_heads) {  // q and k are rotated, v is not
        for (int64_t i = 0; i < half; ++i) {
          const RopePair y = rope_rotate_pair(head[i], head[i + half], angles[2 * i], angles[2 * i + 1]);
          head[i] = round_bf16(y.lo);
          head[i + half] = round_bf16(y.hi);
        }
      }
      if (h < s.heads) {
        for (int64_t i = 0; i < d; ++i) q_out[(r * s.heads + h) * d + i] = float_to_bf16(head[i]);
        continue;
      }
      const bool is_k = h < s.heads + s.kv_heads;
      const int64_t kh = is_k ? h - s.heads : h - s.heads - s.kv_heads;
      const int64_t offset = (cache_row * kv_width + kh * d) * static_cast<int64_t>(element);
      uint16_t* out = is_k ? k_out : v_out;
      store_row(head.data(), d, static_cast<std::byte*>(is_k ? cache.k : cache.v) + offset,
                fp8 ? (is_k ? cache.k_scale : cache.v_scale) + kh : nullptr,
                out == nullptr ? nullptr : out + r * kv_width + kh * d);
    }
  }
}

void decode_attention(const KvShape& s, int64_t batch, const uint16_t* q, const KvConstData& cache, const int32_t* slots,
                      const int32_t* lengths, float scale, uint16_t* out) {
  const int64_t d = s.head_dim, kv_width = s.kv_heads * d, group = s.heads / s.kv_heads;
  const bool fp8 = cache.k_scale != nullptr;
#pragma omp parallel for schedule(dynamic) if (batch * s.heads > 1)
  for (int64_t bh = 0; bh < batch * s.heads; ++bh) {
    const int64_t b = bh / s.heads, h = bh % s.heads, kh = h / group, length = lengths[b];
    const int64_t first = static_cast<int64_t>(slots[b]) * s.capacity;  // the slot's row 0
    const float* k_scale = fp8 ? cache.k_scale + kh : nullptr;
    const float* v_scale = fp8 ? cache.v_scale + kh : nullptr;
    std::vector<float> query(static_cast<size_t>(d)), scores(static_cast<size_t>(length)),
        sum(static_cast<size_t>(d), 0.0f);
    for (int64_t i = 0; i < d; ++i) query[i] = bf16_to_float(q[bh * d + i]);
    float max = -INFINITY;
    for (int64_t j = 0; j < length; ++j) {
      float dot = 0.0f;
      for (int64_t i = 0; i < d; ++i) dot += query[i] * cached(cache.k, first + j, kv_width, kh * d + i, k_scale);
      scores[j] = scale * dot;
      max = std::max(max, scores[j]);
    }
    float total = 0.0f;
    for (int64_t j = 0; j < length; ++j) {
      const float p = std::exp(scores[j] - max);
      total += p;
      for (int64_t i = 0; i < d; ++i) sum[i] += p * cached(cache.v, first + j, kv_width, kh * d + i, v_scale);
    }
    for (int64_t i = 0; i < d; ++i) out[bh * d + i] = float_to_bf16(sum[i] / total);
  }
}

}  // namespace fp8kit::ops::cpu
