// SwiGLU on the GPU (ops/cpu/swiglu.h's formulas, float32, expf: within ~2 ulp of the CPU). Device
// pointers; n elements.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/activation_out.h"

namespace fp8kit::cuda {

void swiglu_forward(int64_t n, const float* gate, const float* up, bool bf16, float* out, cudaStream_t stream);
// dgate may be gate and dup up.
void swiglu_backward(int64_t n, const float* gate, const float* up, const float* dout, float* dgate, float* dup,
                     cudaStream_t stream);

// Inference's form (ops::swiglu): gate_up [rows, 2 ffn] bf16 (gate, then up) -> bf16(silu(gate) up)
// [rows, ffn] written as `out` says. A block per row holding its results in registers (ffn <= 32768;
// 16-byte loads where ffn % 8 == 0 and the rows are aligned), at few rows a cluster of blocks.
void swiglu(int64_t rows, int64_t ffn, const uint16_t* gate_up, const ActivationOutArgs& out, cudaStream_t stream);

}  // namespace fp8kit::cuda
