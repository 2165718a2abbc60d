// SwiGLU on the GPU (ops/cpu/swiglu.h's formulas, float32, expf: within ~2 ulp of the CPU). Device
// pointers; n elements.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fp8kit::cuda {

void swiglu_forward(int64_t n, const float* gate, const float* up, bool bf16, float* out, cudaStream_t stream);
// dgate may be gate and dup up.
void swiglu_backward(int64_t n, const float* gate, const float* up, const float* dout, float* dgate, float* dup,
                     cudaStream_t stream);

}  // namespace fp8kit::cuda
