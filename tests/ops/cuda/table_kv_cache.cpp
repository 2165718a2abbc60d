// Op table rows: the KV cache. kv_append bit for bit (q_out, k_out, v_out and the whole cache after
// it: RoPE's rounded products, bf16 rounding and E4M3 casts are exact on both devices), bf16 and E4M3
// caches, decode steps (rows in scattered slots, out of order) and a prefill (one sequence's 37
// positions), head_dim 16, 64 and 128, GQA 1, 2, 4. decode_attention within float32 summation order
// (the output is bf16: about an ulp of it, 2^-8 relative), bf16 and E4M3, head_dim 64 and 128,
// heads / kv_heads 1 to 8 (bf16 at 8: two blocks of 4 query heads per KV head), lengths 1, odd and the
// capacity, slots out of order, a capacity that is not a multiple of any chunk, and Llama-3-8B's
// shape at 4 x 2048 (chunks of 128 keys) and 64 x 512 (chunks of 256), queries of magnitude 1e6 and 1e-6.
#include "kv_cache_inputs.h"
#include "ops/rope.h"

#include <fmt/format.h>

namespace fp8kit::testing {
namespace {

struct AppendRow {
  int64_t heads, kv_heads, head_dim, rows;
  bool prefill;  // rows 0..rows-1 of slot 1; else scattered (slot, position) pairs
};

std::vector<Tensor> append(ops::Context& c, const AppendRow& p, DType dtype) {
  const KvCacheCase s{5, 40, p.heads, p.kv_heads, p.head_dim, dtype};
  ops::KvCacheLayer cache = random_cache(c, s, 3);
  std::vector<Tensor> out(6);
  ops::rope_table(c, s.capacity, p.head_dim, 500000.0, out[0]);
  std::vector<int32_t> positions, slots;
  for (int32_t r = 0; r < p.rows; ++r) {
    positions.push_back(p.prefill ? r : (r * 17 + 5) % 40);
    slots.push_back(p.prefill ? 1 : (r * 3 + 4) % 5);
  }
  const int64_t width = (p.heads + 2 * p.kv_heads) * p.head_dim;
  // qkv as bf16 values; magnitudes up to 8 so that E4M3 saturates in head 0 (8 / 0.01 > 448).
  const Tensor qkv = device_tensor(random_values(p.rows * width, 5, -8.0f, 8.0f), {p.rows, width}, c.device(),
                                   DType::Bf16);
  ops::kv_append(c, out[0], qkv, device_ints(positions, {p.rows}, c.device()),
                 device_ints(slots, {p.rows}, c.device()), p.heads, cache, out[1], &out[2], &out[3]);
  out[4] = std::move(cache.k);
  out[5] = std::move(cache.v);
  c.synchronize();
  return out;
}

struct DecodeRow {
  const char* name;
  KvCacheCase cache;
  std::vector<int32_t> lengths;  // one per sequence; slots out of order
  float scale;
  float q_range = 1.0f;  // q in [-q_range, q_range]
};

std::vector<Tensor> decode(ops::Context& c, const DecodeRow& p) {
  const KvCacheCase& s = p.cache;
  const ops::KvCacheLayer cache = random_cache(c, s, 11, 4.0f);
  const auto batch = static_cast<int64_t>(p.lengths.size());
  std::vector<int32_t> slots;
  for (int64_t b = 0; b < batch; ++b) slots.push_back(static_cast<int32_t>((b * 7 + 3) % s.slots));
  const Tensor q = device_tensor(random_values(batch * s.heads * s.head_dim, 13, -p.q_range, p.q_range),
                                 {batch, s.heads * s.head_dim}, c.device(), DType::Bf16);
  std::vector<Tensor> out(1);
  ops::decode_attention(c, q, cache, device_ints(slots, {batch}, c.device()),
                        device_ints(p.lengths, {batch}, c.device()), s.heads, p.scale, out[0]);
  c.synchronize();
  return out;
}

// n lengths in [1, capacity] from a fixed pattern, with 1 and the capacity among them.
std::vector<int32_t> spread(int64_t n, int32_t capacity) {
  std::vector<int32_t> lengths;
  for (int64_t b = 0; b < n; ++b) lengths.push_back(static_cast<int32_t>((b * 997 + 1) % capacity + 1));
  lengths.back() = capacity;
  return lengths;
}

const RegisterOps rows([](std::vector<OpCase>& t) {
  const AppendRow appends[] = {{4, 4, 16, 5, false}, {8, 2, 64, 7, false}, {32, 8, 128, 3, false},
                               {4, 1, 128, 37, true}, {6, 2, 64, 37, true}};
  for (const AppendRow& p : appends) {
    for (const DType dtype : {DType::Bf16, DType::E4M3}) {
      t.push_back({fmt::format("kv_append/{}/h{}_kv{}_d{}_rows{}{}", name(dtype), p.heads, p.kv_heads, p.head_dim,
                               p.rows, p.prefill ? "_prefill" : ""),
                   [=](ops::Context& c) { return append(c, p, dtype); }});
    }
  }
  for (const DType dtype : {DType::Bf16, DType::E4M3}) {
    const DecodeRow decodes[] = {
        {"b3_h4_kv4_d64_cap300", {5, 300, 4, 4, 64, dtype}, {1, 37, 300}, 0.0f},
        {"b3_h4_kv2_d128_cap300", {4, 300, 4, 2, 128, dtype}, {300, 1, 151}, 0.0f},
        {"b2_h6_kv2_d64_cap64", {3, 64, 6, 2, 64, dtype}, {63, 64}, 0.5f},
        {"b2_h16_kv2_d128_cap1000", {2, 1000, 16, 2, 128, dtype}, {999, 257}, 0.0f},
        {"b2_h8_kv2_d64_cap33", {2, 33, 8, 2, 64, dtype}, {33, 1}, 0.0f},
        {"b4_h32_kv8_d128_cap2048", {4, 2048, 32, 8, 128, dtype}, {2048, 1, 1000, 1537}, 0.0f},
        {"b64_h32_kv8_d128_cap512", {64, 512, 32, 8, 128, dtype}, spread(64, 512), 0.0f},
        // Groups of 5, 6 and 7 query heads per KV head (an E4M3 block takes them all).
        {"b2_h10_kv2_d64_cap100", {3, 100, 10, 2, 64, dtype}, {100, 37}, 0.0f},
        {"b2_h12_kv2_d128_cap100", {3, 100, 12, 2, 128, dtype}, {1, 99}, 0.0f},
        {"b1_h14_kv2_d128_cap64", {2, 64, 14, 2, 128, dtype}, {64}, 0.0f},
        // Queries past f16's range and deep in its subnormals (E4M3 multiplies them as f16s).
        {"b3_h4_kv2_d128_cap300_q1e6", {4, 300, 4, 2, 128, dtype}, {300, 1, 151}, 1e-6f, 1e6f},
        {"b3_h4_kv2_d128_cap300_q1e-6", {4, 300, 4, 2, 128, dtype}, {300, 1, 151}, 1e5f, 1e-6f},
    };
    for (const DecodeRow& p : decodes) {
      t.push_back({fmt::format("decode_attention/{}/{}", name(dtype), p.name),
                   [=](ops::Context& c) { return decode(c, p); }, 2e-3, 1e-2});
    }
  }
});

}  // namespace
}  // namespace fp8kit::testing
