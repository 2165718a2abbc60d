// The SwiGLU gate of Llama's MLP, out = silu(gate) * up with silu(g) = g / (1 + exp(-g)), and its
// gradient, on Tensors on either device (float32 math; the same bits on both devices within the
// accuracy of expf, ~2 ulp).
#pragma once

#include "ops/context.h"
#include "tensor/tensor.h"

namespace fp8kit::ops {

// gate, up [rows, ffn] f32 -> out [rows, ffn] (resized); bf16 rounds out to bf16.
void swiglu_forward(Context& c, const Tensor& gate, const Tensor& up, bool bf16, Tensor& out);
// dgate = dout * up * silu'(gate), dup = dout * silu(gate) (resized; they may alias gate and up,
// which are read first element by element).
void swiglu_backward(Context& c, const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup);

}  // namespace fp8kit::ops
