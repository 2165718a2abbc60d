// Amax history: a FIFO window, newest at slot 0.
#include "numerics/amax_history.h"

#include "base/error.h"

#include <algorithm>
#include <cmath>

namespace fp8kit {

AmaxHistory::AmaxHistory(size_t length) : window_(length, 0.0f) {
  FP8KIT_CHECK(length >= 1, "amax history length must be at least 1, got {}", length);
}

void AmaxHistory::push(float amax, bool skip_zero) {
  if (skip_zero && amax == 0.0f) return;
  std::copy_backward(window_.begin(), window_.end() - 1, window_.end());
  window_[0] = amax;
}

float AmaxHistory::amax(AmaxAlgorithm algorithm) const {
  if (algorithm == AmaxAlgorithm::MostRecent) return window_[0];
  // As torch.amax / jnp.max: a NaN slot makes the max NaN (delayed scaling then keeps its scale).
  float result = 0.0f;
  for (float a : window_) {
    if (std::isnan(a)) return a;
    result = std::max(result, a);
  }
  return result;
}

}  // namespace fp8kit
