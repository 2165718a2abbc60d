// Greedy sampling on the GPU (ops/sampling.h's semantics). Device pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/tensor.h"

namespace fp8kit::cuda {

// ids[r] = the first index of the maximum of row r of logits [rows, n] (f32 or bf16: logits_type);
// NaN never wins, a row of NaN gives 0. A block of 1024 threads per row, 16-byte loads where n allows.
void argmax_rows(int64_t rows, int64_t n, const void* logits, DType logits_type, int32_t* ids, cudaStream_t stream);

}  // namespace fp8kit::cuda
