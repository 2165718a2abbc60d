// SwiGLU's CPU core on float32 arrays: the reference of ops/swiglu.h's Tensor op.
#pragma once

#include <cmath>
#include <cstdint>

namespace fp8kit::ops::cpu {

// silu(g) u = g / (1 + exp(-g)) u in float32, in this order (the GPU's kernels do the same operations).
inline float swiglu_value(float g, float u) { return g / (1.0f + std::exp(-g)) * u; }

// out[i] = silu(gate[i]) up[i], silu(g) = g / (1 + exp(-g)); bf16 rounds out to bf16.
void swiglu_forward(int64_t n, const float* gate, const float* up, bool bf16, float* out);
// Inference's form on bf16: gate_up [rows, 2 ffn] (gate in columns [0, ffn), up in [ffn, 2 ffn)) ->
// out [rows, ffn] = bf16(swiglu_value(gate, up)).
void swiglu_bf16(int64_t rows, int64_t ffn, const uint16_t* gate_up, uint16_t* out);
// dgate[i] = dout[i] up[i] silu'(gate[i]), silu'(g) = sig (1 + g (1 - sig)) with sig = 1 / (1 + exp(-g));
// dup[i] = dout[i] silu(gate[i]). dgate may be gate and dup up (each element is read before it is written).
void swiglu_backward(int64_t n, const float* gate, const float* up, const float* dout, float* dgate, float* dup);

}  // namespace fp8kit::ops::cpu
