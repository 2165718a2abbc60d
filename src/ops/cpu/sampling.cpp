// Greedy sampling on the CPU: a row at a time, threaded over rows.
#include "ops/cpu/sampling.h"

#include "numerics/cast.h"

#include <cmath>

namespace fp8kit::ops::cpu {
namespace {

float value_of(float v) { return v; }
float value_of(uint16_t v) { return bf16_to_float(v); }

template <typename T>
void argmax(int64_t rows, int64_t n, const T* logits, int32_t* ids) {
#pragma omp parallel for schedule(static) if (rows * n >= 65536)
  for (int64_t r = 0; r < rows; ++r) {
    const T* row = logits + r * n;
    int64_t best = -1;
    float best_value = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      const float v = value_of(row[i]);
      if (std::isnan(v)) continue;
      if (best < 0 || v > best_value) best = i, best_value = v;  // strictly greater: the first maximum stays
    }
    ids[r] = static_cast<int32_t>(best < 0 ? 0 : best);
  }
}

}  // namespace

void argmax_rows(int64_t rows, int64_t n, const float* logits, int32_t* ids) { argmax(rows, n, logits, ids); }
void argmax_rows(int64_t rows, int64_t n, const uint16_t* logits, int32_t* ids) { argmax(rows, n, logits, ids); }

}  // namespace fp8kit::ops::cpu
