// SwiGLU's CPU core on float32 arrays: the reference of ops/swiglu.h's Tensor op.
#pragma once

#include <cstdint>

namespace fp8kit::ops::cpu {

// out[i] = silu(gate[i]) up[i], silu(g) = g / (1 + exp(-g)); bf16 rounds out to bf16.
void swiglu_forward(int64_t n, const float* gate, const float* up, bool bf16, float* out);
// dgate[i] = dout[i] up[i] silu'(gate[i]), silu'(g) = sig (1 + g (1 - sig)) with sig = 1 / (1 + exp(-g));
// dup[i] = dout[i] silu(gate[i]). dgate may be gate and dup up (each element is read before it is written).
void swiglu_backward(int64_t n, const float* gate, const float* up, const float* dout, float* dgate, float* dup);

}  // namespace fp8kit::ops::cpu
