// Inputs of the KV cache's GPU tests: a cache of given contents on any device (the same bytes on both
// devices), from a fixed seed.
#pragma once

#include "numerics/cast.h"
#include "ops/cuda/op_table.h"
#include "ops/kv_cache.h"

#include <random>
#include <vector>

namespace fp8kit::testing {

struct KvCacheCase {
  int64_t slots, capacity, heads, kv_heads, head_dim;
  DType dtype;
};

// A cache on c's device filled from `seed`: bf16 values uniform in [-range, range), or E4M3 codes of any
// finite value with scales of 0.01 (k) and 0.004 (v) times a per-head factor (so that heads differ).
inline ops::KvCacheLayer random_cache(ops::Context& c, const KvCacheCase& s, uint64_t seed, float range = 2.0f) {
  std::vector<float> k_scales, v_scales;
  for (int64_t h = 0; h < s.kv_heads; ++h) {
    k_scales.push_back(0.01f * static_cast<float>(h % 3 + 1));
    v_scales.push_back(0.004f / static_cast<float>(h % 3 + 1));
  }
  const Device d = c.device();
  ops::KvCacheLayer cache =
      s.dtype == DType::E4M3
          ? ops::make_kv_cache_layer(c, s.slots, s.capacity, s.kv_heads, s.head_dim, s.dtype,
                                     device_tensor(k_scales, {s.kv_heads}, d), device_tensor(v_scales, {s.kv_heads}, d))
          : ops::make_kv_cache_layer(c, s.slots, s.capacity, s.kv_heads, s.head_dim, s.dtype);
  std::mt19937_64 rng(seed);
  for (Tensor* t : {&cache.k, &cache.v}) {
    Tensor host(t->shape(), t->dtype());
    if (s.dtype == DType::E4M3) {
      for (uint8_t& code : host.span<uint8_t>()) {
        code = static_cast<uint8_t>(rng());
        if ((code & 0x7F) == 0x7F) code ^= 1;  // NaN -> 448
      }
    } else {
      const std::vector<float> values = random_values(host.numel(), rng(), -range, range);
      for (int64_t i = 0; i < host.numel(); ++i) host.data<uint16_t>()[i] = float_to_bf16(values[i]);
    }
    t->copy_from(host);
  }
  return cache;
}

}  // namespace fp8kit::testing
