// Mean pooling over the sequence axis on the GPU (ops/cpu/mean_pool.h's cores). Device pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/dropout.h"

namespace fp8kit::cuda {

// x [batch, seq, dim] -> out [batch, dim] = dropout_forward(sum over seq / seq) (summed in sequence
// order; bf16: the mean rounded, and dropout as in bf16, ops::dropout_forward's values over [batch,
// dim]; an inactive site: the mean itself).
void mean_pool_forward(const float* x, int64_t batch, int64_t seq, int64_t dim, bool bf16, const DropoutSite& dropout,
                       float* out, cudaStream_t stream);
// dx [batch, seq, dim] = dropout_backward(dout) [batch, dim] / seq: dout is the gradient of the
// pooled output or, with an active `dropout` (keep probability as in bf16 or float32 training), of the
// dropout that followed it (ops::dropout_backward's values, elements indexed over [batch, dim]).
void mean_pool_backward(const float* dout, const DropoutSite& dropout, bool bf16, int64_t batch, int64_t seq,
                        int64_t dim, float* dx, cudaStream_t stream);

}  // namespace fp8kit::cuda
