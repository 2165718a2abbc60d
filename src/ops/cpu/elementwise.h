// Element-wise CPU cores on float32 spans: the exact references of ops/elementwise.h's Tensor ops, also
// the CPU seed model's residual sums.
#pragma once

#include <span>

namespace fp8kit::ops::cpu {

// out = a + b, rounded to bf16 when bf16. out may alias a or b.
void add(std::span<const float> a, std::span<const float> b, bool bf16, std::span<float> out);

// out = a + ((b + c) + d), float32 in that order, for 1 to 3 more spans `rest` = {b[, c[, d]]} (with
// fewer: a + b, a + (b + c)). out may alias any of them.
void sum(std::span<const float> a, std::span<const std::span<const float>> rest, std::span<float> out);

}  // namespace fp8kit::ops::cpu
