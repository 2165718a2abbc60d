// Softmax cross-entropy on the CPU: per row a max pass, a sum pass, and the gradient pass (which may
// overwrite the logits), threaded over rows.
#include "ops/cpu/cross_entropy.h"

#include "base/error.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace fp8kit::ops::cpu {

void cross_entropy(int64_t rows, int64_t vocab, const float* logits, const int32_t* targets, float grad_scale,
                   float* losses, float* dlogits) {
  for (int64_t r = 0; r < rows; ++r)
    FP8KIT_CHECK(targets[r] < vocab,
                 "cross_entropy: target {} of row {} is outside the vocabulary [0, {}) of the logits (negative "
                 "targets mark ignored rows)",
                 targets[r], r, vocab);
#pragma omp parallel for schedule(static) if (rows * vocab >= 65536)
  for (int64_t r = 0; r < rows; ++r) {
    const float* l = logits + r * vocab;
    float* d = dlogits != nullptr ? dlogits + r * vocab : nullptr;
    const int32_t target = targets[r];
    if (target < 0) {
      losses[r] = 0.0f;
      if (d != nullptr) std::fill(d, d + vocab, 0.0f);
      continue;
    }
    float m = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < vocab; ++i) m = std::max(m, l[i]);
    // The exponentials added in double: a float sum of 50K-256K positive terms drifts by ~1e-5 relative.
    double total = 0.0;
    for (int64_t i = 0; i < vocab; ++i) total += std::exp(l[i] - m);
    const float s = static_cast<float>(total);
    losses[r] = std::log(s) - (l[target] - m);  // before d (which may be l) is written
    if (d == nullptr) continue;
    const float inv = 1.0f / s;
    for (int64_t i = 0; i < vocab; ++i) d[i] = (std::exp(l[i] - m) * inv - (i == target ? 1.0f : 0.0f)) * grad_scale;
  }
}

}  // namespace fp8kit::ops::cpu
