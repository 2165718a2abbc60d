// Greedy sampling's CPU core (ops/sampling.h).
#pragma once

#include <cstdint>

namespace fp8kit::ops::cpu {

// ids[r] = the first index of the maximum of logits row r ([rows, n]); NaN never wins, a row of NaN
// (or n = 0) gives 0. f32, or bf16 (raw 16-bit patterns).
void argmax_rows(int64_t rows, int64_t n, const float* logits, int32_t* ids);
void argmax_rows(int64_t rows, int64_t n, const uint16_t* logits, int32_t* ids);

}  // namespace fp8kit::ops::cpu
