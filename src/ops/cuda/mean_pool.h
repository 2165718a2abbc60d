// Mean pooling over the sequence axis on the GPU (nn::mean_pool_forward/backward). Device pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fp8kit::cuda {

// x [batch, seq, dim] -> out [batch, dim] = sum over seq / seq (summed in sequence order), bf16: rounded.
void mean_pool_forward(const float* x, int64_t batch, int64_t seq, int64_t dim, bool bf16, float* out,
                       cudaStream_t stream);
// dx [batch, seq, dim] = dout [batch, dim] / seq.
void mean_pool_backward(const float* dout, int64_t batch, int64_t seq, int64_t dim, float* dx, cudaStream_t stream);

}  // namespace fp8kit::cuda
