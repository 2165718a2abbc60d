// Where FP8 starts to pay off in a table of measured times per size (`fp8kit lab`'s Part 2).
#pragma once

#include <cstddef>
#include <optional>
#include <span>

namespace fp8kit::lab {

// The index of the smallest size from which FP8 is faster than bf16 at that size and every larger one
// (times per size, sizes ascending); none when FP8 is not faster at the largest.
inline std::optional<size_t> fp8_wins_from(std::span<const double> bf16_ms, std::span<const double> fp8_ms) {
  std::optional<size_t> from;
  for (size_t i = bf16_ms.size(); i-- > 0;) {
    if (!(fp8_ms[i] < bf16_ms[i])) break;
    from = i;
  }
  return from;
}

}  // namespace fp8kit::lab
