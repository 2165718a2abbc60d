// Softmax cross-entropy's CPU core on float32 arrays: the reference of ops/cross_entropy.h's op.
#pragma once

#include <cstdint>

namespace fp8kit::ops::cpu {

// logits [rows, vocab]; targets [rows] (negative: ignored; others must be < vocab, else throws before
// any work). Per row, with m its max and s = sum exp(logits - m) (float exponentials added in double,
// in column order, then rounded):
// losses[r] = log(s) - (logits[r][target] - m); dlogits (null: forward only; may be logits)
// [rows, vocab] = (exp(logits - m) (1 / s) - onehot(target)) grad_scale, zero rows for ignored ones.
void cross_entropy(int64_t rows, int64_t vocab, const float* logits, const int32_t* targets, float grad_scale,
                   float* losses, float* dlogits);

}  // namespace fp8kit::ops::cpu
