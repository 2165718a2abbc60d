// Element-wise sums on the CPU, threaded over elements.
#include "ops/cpu/elementwise.h"

#include "base/error.h"
#include "numerics/cast.h"

#include <cstdint>

namespace fp8kit::ops::cpu {

void add(std::span<const float> a, std::span<const float> b, bool bf16, std::span<float> out) {
  FP8KIT_CHECK(a.size() == out.size() && b.size() == out.size(), "add: sizes {}, {} and {} differ", a.size(), b.size(),
               out.size());
  const int64_t n = static_cast<int64_t>(out.size());
#pragma omp parallel for schedule(static) if (n >= 65536)
  for (int64_t i = 0; i < n; ++i) out[i] = bf16 ? round_bf16(a[i] + b[i]) : a[i] + b[i];
}

void sum(std::span<const float> a, std::span<const std::span<const float>> rest, std::span<float> out) {
  FP8KIT_CHECK(!rest.empty() && rest.size() <= 3, "sum: 1 to 3 spans after the first, got {}", rest.size());
  FP8KIT_CHECK(a.size() == out.size(), "sum: sizes {} and {} differ", a.size(), out.size());
  for (const std::span<const float> r : rest)
    FP8KIT_CHECK(r.size() == out.size(), "sum: sizes {} and {} differ", r.size(), out.size());
  const int64_t n = static_cast<int64_t>(out.size());
  const float* b = rest[0].data();
  const float* c = rest.size() > 1 ? rest[1].data() : nullptr;
  const float* d = rest.size() > 2 ? rest[2].data() : nullptr;
  // The GPU's order (cuda::residual_gradient): (b + c) + d first, then a.
#pragma omp parallel for schedule(static) if (n >= 65536)
  for (int64_t i = 0; i < n; ++i) {
    float s = b[i];
    if (c != nullptr) s += c[i];
    if (d != nullptr) s += d[i];
    out[i] = a[i] + s;
  }
}

}  // namespace fp8kit::ops::cpu
