// fill_normal on the GPU (ops/init.h): ops/normal_value.h's stream, the CPU's bits. Device pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "tensor/tensor.h"

namespace fp8kit::cuda {

// out [n] (f32 or bf16: type) = normal::value(seed, i) * stddev (bf16: rounded to nearest even). One
// pass, each thread 8 consecutive elements stored as 16-byte vectors where aligned.
void fill_normal(int64_t n, void* out, DType type, float stddev, uint64_t seed, cudaStream_t stream);

}  // namespace fp8kit::cuda
