// Helpers of the CPU tests of the ops on Tensors: host tensors from values, and bit-for-bit equality
// with the nn path (or core) an op replaces.
#pragma once

#include "common/host_tensors.h"

#include <cstring>
#include <span>

namespace fp8kit::testing {

// Whether a and b hold the same float bits, element by element (empty spans may have null data,
// which memcmp must not be given).
inline bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

}  // namespace fp8kit::testing
