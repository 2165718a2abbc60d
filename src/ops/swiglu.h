// The SwiGLU gate of Llama's MLP, out = silu(gate) * up with silu(g) = g / (1 + exp(-g)), and its
// gradient, on Tensors on either device (float32 math; the same bits on both devices within the
// accuracy of expf, ~2 ulp).
#pragma once

#include "ops/activation_out.h"
#include "ops/context.h"
#include "tensor/tensor.h"

namespace fp8kit::ops {

// gate, up [rows, ffn] f32 -> out [rows, ffn] (resized); bf16 rounds out to bf16.
void swiglu_forward(Context& c, const Tensor& gate, const Tensor& up, bool bf16, Tensor& out);
// dgate = dout * up * silu'(gate), dup = dout * silu(gate) (resized; they may alias gate and up,
// which are read first element by element).
void swiglu_backward(Context& c, const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup);

// Inference's form: gate_up [rows, 2 ffn] bf16 (one fused GEMM's output: the gate in columns [0, ffn),
// up in [ffn, 2 ffn)) -> out [rows, ffn] = bf16(silu(gate) up) computed as swiglu_forward does in
// float32, written as `out` says (fp8: ops::quantize's bytes of that bf16 result). The GPU's expf is
// within ~2 ulp of the CPU's (out within a bf16 step) and it needs ffn <= 32768.
void swiglu(Context& c, const Tensor& gate_up, const ActivationOut& out);

}  // namespace fp8kit::ops
