// GELU inference on the GPU (ops/gelu.h). Device pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/activation_out.h"

namespace fp8kit::cuda {

// x [rows, cols] bf16 -> bf16(gelu(x)) written as `out` says: the row kernels of activation_out.cuh
// (a row's results in registers until its amax is known; cols <= 32768).
void gelu(int64_t rows, int64_t cols, const uint16_t* x, const ActivationOutArgs& out, cudaStream_t stream);

}  // namespace fp8kit::cuda
