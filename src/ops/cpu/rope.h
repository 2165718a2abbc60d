// Rotary position embeddings' CPU core on float32 and bf16 arrays: the table and the exact reference of
// ops/rope.h's Tensor ops.
#pragma once

#include <cstdint>

namespace fp8kit::ops::cpu {

// table [positions, head_dim / 2, 2]: (cos, sin) of p * inv_freq[i] as ops::rope_table describes.
void rope_table(int64_t positions, int64_t head_dim, double theta, float* table);

// x, out [batch, seq, heads * head_dim] (out may be x); token t of each sequence at position
// start + t of the table. sign +1: the forward's rotation, out[i] = x[i] c - x[i + h] s,
// out[i + h] = x[i + h] c + x[i] s; sign -1: the backward's (s negated, which is exact: the
// transpose's bits). Each product rounded to float32 before the sum (never a fused multiply-add);
// bf16 rounds out to bf16. In, Out: float, or uint16_t for bf16 bits (read exactly; written rounded
// to nearest even, whatever bf16 says).
template <typename In, typename Out>
void rope_rotate(int64_t batch, int64_t seq, int64_t heads, int64_t head_dim, int64_t start, const float* table,
                 const In* x, float sign, bool bf16, Out* out);

}  // namespace fp8kit::ops::cpu
