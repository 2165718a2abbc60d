// Rotary position embeddings on the CPU: the cos/sin table, and the rotation threaded over tokens.
#include "ops/cpu/rope.h"

#include "numerics/cast.h"
#include "ops/rope_pair.h"

#include <cmath>

namespace fp8kit::ops::cpu {

void rope_table(int64_t positions, int64_t head_dim, double theta, float* table) {
  const int64_t half = head_dim / 2;
  const float base = static_cast<float>(theta);
  for (int64_t i = 0; i < half; ++i) {
    // Hugging Face: inv_freq = 1.0 / (base ** (arange(0, dim, 2).float() / dim)), float32 throughout
    // (the power correctly rounded); the angle p * inv_freq a float32 product.
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(head_dim);
    const float power = static_cast<float>(std::pow(static_cast<double>(base), static_cast<double>(exponent)));
    const float inv_freq = 1.0f / power;
    for (int64_t p = 0; p < positions; ++p) {
      const float angle = static_cast<float>(p) * inv_freq;
      float* entry = table + (p * half + i) * 2;
      entry[0] = static_cast<float>(std::cos(static_cast<double>(angle)));
      entry[1] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
  }
}

namespace {

float as_float(float x) { return x; }
float as_float(uint16_t x) { return bf16_to_float(x); }
void store(float y, bool bf16, float* out) { *out = bf16 ? round_bf16(y) : y; }
void store(float y, bool, uint16_t* out) { *out = float_to_bf16(y); }

}  // namespace

template <typename In, typename Out>
void rope_rotate(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, int64_t start, const float* table,
                 const In* x, float sign, bool bf16, Out* out) {
  const int64_t half = head_dim / 2, width = heads * head_dim, tokens = batch * seq;
#pragma omp parallel for schedule(static) if (tokens * width >= 65536)
  for (int64_t bt = 0; bt < tokens; ++bt) {
    const float* angles = table + (start + bt % seq) * half * 2;
    for (int64_t h = 0; h < heads; ++h) {
      const In* a = x + bt * width + h * head_dim;
      Out* o = out + bt * width + h * head_dim;
      for (int64_t i = 0; i < half; ++i) {
        const float c = angles[2 * i], s = sign * angles[2 * i + 1];
        const RopePair y = rope_rotate_pair(as_float(a[i]), as_float(a[i + half]), c, s);
        store(y.lo, bf16, o + i);
        store(y.hi, bf16, o + i + half);
      }
    }
  }
}

template void rope_rotate<float, float>(int64_t, int64_t, int64_t, int64_t, int64_t, const float*, const float*, float,
                                        bool, float*);
template void rope_rotate<float, uint16_t>(int64_t, int64_t, int64_t, int64_t, int64_t, const float*, const float*,
                                           float, bool, uint16_t*);
template void rope_rotate<uint16_t, float>(int64_t, int64_t, int64_t, int64_t, int64_t, const float*, const uint16_t*,
                                           float, bool, float*);
template void rope_rotate<uint16_t, uint16_t>(int64_t, int64_t, int64_t, int64_t, int64_t, const float*,
                                              const uint16_t*, float, bool, uint16_t*);

}  // namespace fp8kit::ops::cpu
