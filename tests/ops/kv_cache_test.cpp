// The KV cache on the CPU: kv_append's q and k against ops::rope_forward on float copies (the same
// bits), its cache rows and k_out / v_out as bf16 or as numerics' E4M3 casts with each head's scale,
// rows in any slot order; decode_attention against a double-precision softmax, grouped-query (heads /
// kv_heads 1, 2, 4), lengths 1, odd and the capacity, slots out of order, E4M3 scales per head, and
// keys past a sequence's length ignored (NaN there); its E4M3 out quantize's bytes of its bf16 out; the
// argument errors.
#include "ops/kv_cache.h"

#include "common/activation_out_checks.h"
#include "common/error_of.h"
#include "cpu_op_test.h"
#include "numerics/cast.h"
#include "ops/rope.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <tuple>
#include <vector>

namespace fp8kit::ops {
namespace {

using testing::error_of;
using ::testing::HasSubstr;

std::vector<float> uniform(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

Tensor ints(const std::vector<int32_t>& values) {
  Tensor t({static_cast<int64_t>(values.size())}, DType::I32);
  std::memcpy(t.data<int32_t>(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

Tensor floats(const std::vector<float>& values) { return testing::host_tensor(values, {int64_t(values.size())}); }

struct AppendCase {
  int64_t heads, kv_heads, head_dim;
  DType dtype;
};

class KvAppend : public ::testing::TestWithParam<AppendCase> {};

// Rows in slots 2, 0, 3, 0 at scattered positions: q and k rotated as rope_forward rotates float copies
// of the bf16 values (bf16 result), v copied; each cache row holds them as bf16 or as E4M3 codes of
// value * (1 / scale) with its head's scale; k_out / v_out what the cache holds; the other rows stay 0.
TEST_P(KvAppend, RotatesLikeRopeForwardAndStoresTheCacheRows) {
  const AppendCase p = GetParam();
  Context c;
  const int64_t slots = 4, capacity = 9, d = p.head_dim, kv_width = p.kv_heads * d;
  const std::vector<int32_t> slot_of{2, 0, 3, 0}, position_of{0, 8, 5, 3};
  const int64_t rows = 4, width = (p.heads + 2 * p.kv_heads) * d;
  Tensor table;
  rope_table(c, capacity, d, 500000.0, table);
  // Values up to 40 so that E4M3 codes at scales 1/8, 1/16... saturate in some heads.
  const Tensor qkv = testing::host_tensor(uniform(rows * width, 1, -40.0f, 40.0f), {rows, width}, DType::Bf16);
  std::vector<float> k_scales, v_scales;
  for (int64_t h = 0; h < p.kv_heads; ++h) {
    k_scales.push_back(0.125f / static_cast<float>(h + 1));
    v_scales.push_back(0.3f * static_cast<float>(h + 1));
  }
  KvCacheLayer cache = p.dtype == DType::E4M3
                           ? make_kv_cache_layer(c, slots, capacity, p.kv_heads, d, p.dtype, floats(k_scales),
                                                 floats(v_scales))
                           : make_kv_cache_layer(c, slots, capacity, p.kv_heads, d, p.dtype);
  Tensor q_out, k_out, v_out;
  kv_append(c, table, qkv, ints(position_of), ints(slot_of), p.heads, cache, q_out, &k_out, &v_out);
  ASSERT_EQ(q_out.shape(), (std::vector<int64_t>{rows, p.heads * d}));
  ASSERT_EQ(k_out.shape(), (std::vector<int64_t>{rows, kv_width}));
  ASSERT_EQ(v_out.shape(), (std::vector<int64_t>{rows, kv_width}));

  const uint16_t* x = qkv.data<uint16_t>();
  std::vector<bool> written(slots * capacity, false);
  for (int64_t r = 0; r < rows; ++r) {
    // The reference rotation: rope_forward on a float copy of this token's heads at its position.
    const auto rotated = [&](int64_t first, int64_t n_heads) {
      std::vector<float> values(n_heads * d);
      for (int64_t i = 0; i < n_heads * d; ++i) values[i] = bf16_to_float(x[r * width + first * d + i]);
      Tensor in = testing::host_tensor(values, {1, 1, n_heads * d}), out;
      rope_forward(c, table, in, n_heads, position_of[r], true, out);
      return std::vector<float>(out.data<float>(), out.data<float>() + n_heads * d);
    };
    const std::vector<float> q = rotated(0, p.heads), k = rotated(p.heads, p.kv_heads);
    for (int64_t i = 0; i < p.heads * d; ++i) {
      ASSERT_EQ(q_out.data<uint16_t>()[r * p.heads * d + i], float_to_bf16(q[i])) << "row " << r << " q " << i;
    }
    const int64_t cache_row = slot_of[r] * capacity + position_of[r];
    written[cache_row] = true;
    for (int64_t i = 0; i < kv_width; ++i) {
      const int64_t head = i / d;
      const float v = bf16_to_float(x[r * width + (p.heads + p.kv_heads) * d + i]);
      for (const auto& [value, store, out, scale] :
           {std::tuple{k[i], &cache.k, &k_out, k_scales[head]}, std::tuple{v, &cache.v, &v_out, v_scales[head]}}) {
        const int64_t at = cache_row * kv_width + i;
        const bool is_k = store == &cache.k;
        if (p.dtype == DType::Bf16) {
          ASSERT_EQ(store->data<uint16_t>()[at], float_to_bf16(value)) << "row " << r << (is_k ? " k " : " v ") << i;
          ASSERT_EQ(out->data<uint16_t>()[r * kv_width + i], float_to_bf16(value));
        } else {
          const uint8_t code = encode_fp8<Fp8Format::E4M3>(value * (1.0f / scale));
          ASSERT_EQ(store->data<uint8_t>()[at], code) << "row " << r << (is_k ? " k " : " v ") << i;
          ASSERT_EQ(out->data<uint16_t>()[r * kv_width + i],
                    float_to_bf16(decode_fp8<Fp8Format::E4M3>(code) * scale));
        }
      }
    }
  }
  // Rows nobody wrote are still zero.
  const size_t element = p.dtype == DType::Bf16 ? 2 : 1;
  for (int64_t row = 0; row < slots * capacity; ++row) {
    if (written[row]) continue;
    for (const Tensor* t : {&cache.k, &cache.v}) {
      const std::byte* bytes = t->data<std::byte>() + row * kv_width * element;
      for (size_t i = 0; i < kv_width * element; ++i) ASSERT_EQ(bytes[i], std::byte{0}) << "row " << row;
    }
  }
  // Without k_out / v_out the cache and q_out are the same.
  KvCacheLayer again = p.dtype == DType::E4M3 ? make_kv_cache_layer(c, slots, capacity, p.kv_heads, d, p.dtype,
                                                                    floats(k_scales), floats(v_scales))
                                              : make_kv_cache_layer(c, slots, capacity, p.kv_heads, d, p.dtype);
  Tensor q_again;
  kv_append(c, table, qkv, ints(position_of), ints(slot_of), p.heads, again, q_again, nullptr, nullptr);
  EXPECT_EQ(std::memcmp(q_again.data<std::byte>(), q_out.data<std::byte>(), q_out.nbytes()), 0);
  EXPECT_EQ(std::memcmp(again.k.data<std::byte>(), cache.k.data<std::byte>(), cache.k.nbytes()), 0);
  EXPECT_EQ(std::memcmp(again.v.data<std::byte>(), cache.v.data<std::byte>(), cache.v.nbytes()), 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, KvAppend,
                         ::testing::Values(AppendCase{4, 4, 8, DType::Bf16}, AppendCase{4, 2, 16, DType::Bf16},
                                           AppendCase{8, 2, 64, DType::Bf16}, AppendCase{2, 2, 6, DType::E4M3},
                                           AppendCase{8, 2, 16, DType::E4M3}, AppendCase{4, 1, 128, DType::E4M3}));

struct DecodeCase {
  int64_t heads, kv_heads, head_dim;
  DType dtype;
  float scale;
};

class DecodeAttention : public ::testing::TestWithParam<DecodeCase> {};

// Sequences of lengths 1, 37 (odd) and 64 (the capacity) in slots 2, 0, 3 (slot 1 unused): the output
// within float32 summation order and the bf16 rounding of a double-precision softmax over the cached
// keys. Keys past each length hold NaN (bf16 or E4M3 NaN), which must not reach the output.
TEST_P(DecodeAttention, MatchesADoublePrecisionSoftmax) {
  const DecodeCase p = GetParam();
  Context c;
  const int64_t slots = 4, capacity = 64, d = p.head_dim, kv_width = p.kv_heads * d, group = p.heads / p.kv_heads;
  const std::vector<int32_t> slot_of{2, 0, 3}, length_of{1, 37, 64};
  const int64_t batch = 3;
  std::vector<float> k_scales, v_scales;
  for (int64_t h = 0; h < p.kv_heads; ++h) {
    k_scales.push_back(0.01f * static_cast<float>(h + 1));
    v_scales.push_back(0.004f / static_cast<float>(h + 1));
  }
  const bool fp8 = p.dtype == DType::E4M3;
  KvCacheLayer cache = fp8 ? make_kv_cache_layer(c, slots, capacity, p.kv_heads, d, p.dtype, floats(k_scales),
                                                 floats(v_scales))
                           : make_kv_cache_layer(c, slots, capacity, p.kv_heads, d, p.dtype);
  // Cache contents: random bf16 values in [-2, 2] or random finite E4M3 codes; NaN past each length.
  std::mt19937 rng(7);
  std::vector<bool> live(slots * capacity, false);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t j = 0; j < length_of[b]; ++j) live[slot_of[b] * capacity + j] = true;
  for (Tensor* t : {&cache.k, &cache.v}) {
    for (int64_t row = 0; row < slots * capacity; ++row) {
      for (int64_t i = 0; i < kv_width; ++i) {
        const int64_t at = row * kv_width + i;
        if (fp8) {
          uint8_t code = static_cast<uint8_t>(rng());
          if ((code & 0x7F) == 0x7F) code ^= 1;  // finite
          t->data<uint8_t>()[at] = live[row] ? code : uint8_t{0x7F};
        } else {
          const float x = std::uniform_real_distribution<float>(-2.0f, 2.0f)(rng);
          t->data<uint16_t>()[at] = live[row] ? float_to_bf16(x) : uint16_t{0x7FC0};
        }
      }
    }
  }
  const Tensor q = testing::host_tensor(uniform(batch * p.heads * d, 3, -1.0f, 1.0f), {batch, p.heads * d},
                                        DType::Bf16);
  Tensor out;
  decode_attention(c, q, cache, ints(slot_of), ints(length_of), p.heads, p.scale, out);
  ASSERT_EQ(out.shape(), q.shape());

  const double scale = p.scale == 0.0f ? 1.0 / std::sqrt(static_cast<double>(d)) : p.scale;
  const auto value = [&](const Tensor& t, const std::vector<float>& scales, int64_t row, int64_t kh, int64_t i) {
    const int64_t at = row * kv_width + kh * d + i;
    return fp8 ? static_cast<double>(decode_fp8<Fp8Format::E4M3>(t.data<uint8_t>()[at])) * scales[kh]
               : static_cast<double>(bf16_to_float(t.data<uint16_t>()[at]));
  };
  double worst = 0;
  for (int64_t b = 0; b < batch; ++b) {
    for (int64_t h = 0; h < p.heads; ++h) {
      const int64_t kh = h / group, first = slot_of[b] * capacity;
      std::vector<double> scores(length_of[b]);
      double max = -INFINITY;
      for (int64_t j = 0; j < length_of[b]; ++j) {
        double dot = 0;
        for (int64_t i = 0; i < d; ++i)
          dot += bf16_to_float(q.data<uint16_t>()[(b * p.heads + h) * d + i]) * value(cache.k, k_scales, first + j, kh, i);
        scores[j] = scale * dot;
        max = std::max(max, scores[j]);
      }
      double total = 0;
      for (double& s : scores) total += (s = std::exp(s - max));
      for (int64_t i = 0; i < d; ++i) {
        double want = 0;
        for (int64_t j = 0; j < length_of[b]; ++j) want += scores[j] * value(cache.v, v_scales, first + j, kh, i);
        want /= total;
        const float got = bf16_to_float(out.data<uint16_t>()[(b * p.heads + h) * d + i]);
        const double error = std::fabs(got - want);
        worst = std::max(worst, error);
        // bf16 rounding (half an ulp: 2^-9 relative) plus float32 sums.
        ASSERT_LE(error, std::fabs(want) * 0x1p-8 + 1e-5) << "b " << b << " h " << h << " i " << i << " want " << want;
      }
    }
  }
  RecordProperty("worst_error", std::to_string(worst));
}

INSTANTIATE_TEST_SUITE_P(Shapes, DecodeAttention,
                         ::testing::Values(DecodeCase{2, 2, 16, DType::Bf16, 0.0f},
                                           DecodeCase{4, 2, 64, DType::Bf16, 0.0f},
                                           DecodeCase{8, 2, 128, DType::Bf16, 0.3f},
                                           DecodeCase{3, 3, 8, DType::E4M3, 0.0f},
                                           DecodeCase{4, 2, 64, DType::E4M3, 0.0f},
                                           DecodeCase{4, 1, 128, DType::E4M3, 2.0f}));

// A prefill's appended k_out / v_out are what decode reads: one sequence attending to all of its
// tokens through the cache equals the softmax over k_out / v_out.
TEST(KvCache, DecodeReadsWhatAppendReturned) {
  Context c;
  const int64_t heads = 4, kv_heads = 2, d = 16, seq = 5, width = (heads + 2 * kv_heads) * d;
  Tensor table;
  rope_table(c, 8, d, 10000.0, table);
  KvCacheLayer cache =
      make_kv_cache_layer(c, 2, 8, kv_heads, d, DType::E4M3, floats({0.01f, 0.02f}), floats({0.005f, 0.003f}));
  const Tensor qkv = testing::host_tensor(uniform(seq * width, 11, -1.0f, 1.0f), {seq, width}, DType::Bf16);
  Tensor q_out, k_out, v_out;
  kv_append(c, table, qkv, ints({0, 1, 2, 3, 4}), ints({1, 1, 1, 1, 1}), heads, cache, q_out, &k_out, &v_out);
  // The last token's query.
  Tensor q({1, heads * d}, DType::Bf16), out;
  std::memcpy(q.data<uint16_t>(), q_out.data<uint16_t>() + (seq - 1) * heads * d, heads * d * sizeof(uint16_t));
  decode_attention(c, q, cache, ints({1}), ints({5}), heads, 0.0f, out);
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t kh = h / 2;
    std::vector<double> p(seq);
    double total = 0;
    for (int64_t j = 0; j < seq; ++j) {
      double dot = 0;
      for (int64_t i = 0; i < d; ++i)
        dot += bf16_to_float(q.data<uint16_t>()[h * d + i]) * bf16_to_float(k_out.data<uint16_t>()[(j * kv_heads + kh) * d + i]);
      total += p[j] = std::exp(dot / 4.0);
    }
    for (int64_t i = 0; i < d; ++i) {
      double want = 0;
      for (int64_t j = 0; j < seq; ++j) want += p[j] * bf16_to_float(v_out.data<uint16_t>()[(j * kv_heads + kh) * d + i]);
      want /= total;
      // k_out / v_out are the cached values rounded to bf16: a few bf16 ulps of the inputs.
      EXPECT_NEAR(bf16_to_float(out.data<uint16_t>()[h * d + i]), want, 0.01 * std::fabs(want) + 0.01) << h << " " << i;
    }
  }
}

// decode_attention's E4M3 out (the output projection's input in a decode step) is quantize's bytes
// of its bf16 out; per-row scales are refused.
TEST(KvCache, DecodeAttentionFp8OutIsQuantizeOfItsBf16) {
  Context c;
  const int64_t heads = 4, kv_heads = 2, d = 16;
  KvCacheLayer cache =
      make_kv_cache_layer(c, 2, 8, kv_heads, d, DType::E4M3, floats({0.01f, 0.02f}), floats({0.5f, 0.3f}));
  std::mt19937 rng(5);
  for (Tensor* t : {&cache.k, &cache.v})
    for (uint8_t& code : t->span<uint8_t>()) code = static_cast<uint8_t>(rng() % 0x7E);  // finite, positive
  const Tensor q = testing::host_tensor(uniform(2 * heads * d, 7, -1.0f, 1.0f), {2, heads * d}, DType::Bf16);
  testing::expect_fp8_is_quantized_bf16(
      c, [&](const ActivationOut& out) { decode_attention(c, q, cache, ints({1, 0}), ints({8, 3}), heads, 0.0f, out); },
      true);
  QTensor codes;
  EXPECT_THAT(error_of([&] {
                decode_attention(c, q, cache, ints({1, 0}), ints({8, 3}), heads, 0.0f,
                                 {.fp8 = &codes, .spec = {.granularity = Granularity::PerRow}});
              }),
              HasSubstr("decode_attention: an fp8 out takes a per-tensor scale"));
}

TEST(KvCache, MakesAZeroedCache) {
  Context c;
  const KvCacheLayer bf16 = make_kv_cache_layer(c, 3, 5, 2, 8, DType::Bf16);
  EXPECT_EQ(bf16.k.shape(), (std::vector<int64_t>{3, 5, 16}));
  EXPECT_EQ(bf16.slots(), 3);
  EXPECT_EQ(bf16.capacity(), 5);
  EXPECT_FALSE(bf16.fp8());
  EXPECT_EQ(bf16.k_scale.numel(), 0);
  for (uint16_t x : bf16.v.span<uint16_t>()) ASSERT_EQ(x, 0);
  const KvCacheLayer fp8 = make_kv_cache_layer(c, 1, 4, 2, 8, DType::E4M3, floats({1.0f, 2.0f}), floats({3.0f, 4.0f}));
  EXPECT_TRUE(fp8.fp8());
  EXPECT_EQ(fp8.v.dtype(), DType::E4M3);
  EXPECT_EQ(fp8.v_scale.data<float>()[1], 4.0f);
}

TEST(KvCache, ArgumentErrors) {
  Context c;
  EXPECT_THAT(error_of([&] { make_kv_cache_layer(c, 1, 4, 2, 7, DType::Bf16); }),
              HasSubstr("make_kv_cache_layer: head_dim must be even and >= 2 (RoPE pairs), got 7"));
  EXPECT_THAT(error_of([&] { make_kv_cache_layer(c, 1, 4, 2, 8, DType::F32); }),
              HasSubstr("the cache's dtype must be bf16 or e4m3, got f32"));
  EXPECT_THAT(error_of([&] { make_kv_cache_layer(c, 1, 4, 2, 8, DType::E4M3); }),
              HasSubstr("an e4m3 cache needs k_scale ([2] f32"));
  EXPECT_THAT(error_of([&] { make_kv_cache_layer(c, 1, 4, 2, 8, DType::E4M3, floats({1, 0}), floats({1, 1})); }),
              HasSubstr("k_scale[1] = 0 must be finite and > 0"));
  EXPECT_THAT(error_of([&] { make_kv_cache_layer(c, 1, 4, 2, 8, DType::E4M3, floats({1, 1}), floats({1})); }),
              HasSubstr("v_scale must be [2], got [1]"));
  EXPECT_THAT(error_of([&] { make_kv_cache_layer(c, 1, 4, 2, 8, DType::Bf16, floats({1, 1}), floats({1, 1})); }),
              HasSubstr("a bf16 cache takes no k_scale / v_scale"));

  KvCacheLayer cache = make_kv_cache_layer(c, 2, 4, 2, 8, DType::Bf16);
  Tensor table, q_out, out;
  rope_table(c, 16, 8, 10000.0, table);
  const Tensor qkv({1, 8 * 8}, DType::Bf16);  // heads 4: (4 + 2 * 2) * 8
  EXPECT_THAT(error_of([&] { kv_append(c, table, qkv, ints({4}), ints({0}), 4, cache, q_out, nullptr, nullptr); }),
              HasSubstr("kv_append: positions[0] = 4 is outside [0, 3]"));
  EXPECT_THAT(error_of([&] { kv_append(c, table, qkv, ints({0}), ints({2}), 4, cache, q_out, nullptr, nullptr); }),
              HasSubstr("kv_append: slots[0] = 2 is outside [0, 1]"));
  EXPECT_THAT(error_of([&] { kv_append(c, table, qkv, ints({0}), ints({0}), 2, cache, q_out, nullptr, nullptr); }),
              HasSubstr("qkv must be [rows, (heads + 2 kv_heads) * head_dim] = [rows, 48], got [1, 64]"));
  EXPECT_THAT(error_of([&] { kv_append(c, table, qkv, ints({0}), ints({0}), 3, cache, q_out, nullptr, nullptr); }),
              HasSubstr("heads (3) must be a positive multiple of the cache's kv_heads (2)"));
  KvCacheLayer unmade;
  EXPECT_THAT(error_of([&] { kv_append(c, table, qkv, ints({0}), ints({0}), 4, unmade, q_out, nullptr, nullptr); }),
              HasSubstr("the cache is not made: use make_kv_cache_layer"));

  const Tensor q({2, 4 * 8}, DType::Bf16);
  EXPECT_THAT(error_of([&] { decode_attention(c, q, cache, ints({0, 1}), ints({1, 0}), 4, 0.0f, out); }),
              HasSubstr("decode_attention: lengths[1] = 0 is outside [1, 4]"));
  EXPECT_THAT(error_of([&] { decode_attention(c, q, cache, ints({0, 1}), ints({5, 1}), 4, 0.0f, out); }),
              HasSubstr("lengths[0] = 5 is outside [1, 4]"));
  EXPECT_THAT(error_of([&] { decode_attention(c, q, cache, ints({0, -1}), ints({1, 1}), 4, 0.0f, out); }),
              HasSubstr("slots[1] = -1 is outside [0, 1]"));
  EXPECT_THAT(error_of([&] { decode_attention(c, q, cache, ints({0}), ints({1}), 4, 0.0f, out); }),
              HasSubstr("slots must be [2], got [1]"));
  EXPECT_THAT(error_of([&] { decode_attention(c, q, cache, ints({0, 1}), ints({1, 1}), 4, -1.0f, out); }),
              HasSubstr("scale must be finite and >= 0"));
}

}  // namespace
}  // namespace fp8kit::ops
