// Amax history for delayed scaling: a FIFO window of the last L amaxes, newest at slot 0 (the
// Keras/Flax layout, so it can be saved and printed as is), initialised to zeros. Slot i holds the
// amax of i pushes ago. (Keras stores the same set of amaxes, rotated differently in slots 1..L-1.)
#pragma once

#include <cstddef>
#include <span>
#include <vector>

namespace fp8kit {

enum class AmaxAlgorithm { Max, MostRecent };

class AmaxHistory {
 public:
  explicit AmaxHistory(size_t length = 1024);

  // Rolls the window by one and puts `amax` at slot 0. With skip_zero (TE's behaviour for a module
  // that did not run) an amax of exactly 0 leaves the window untouched.
  void push(float amax, bool skip_zero = false);
  // Max over the window (NaN if a slot is NaN, as torch.amax and jnp.max give), or slot 0.
  float amax(AmaxAlgorithm algorithm) const;

  size_t length() const { return window_.size(); }
  std::span<const float> values() const { return window_; }  // slot 0 = newest
  std::span<float> values() { return window_; }              // for checkpoint restore

 private:
  std::vector<float> window_;
};

}  // namespace fp8kit
