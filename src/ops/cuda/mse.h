// The MSE loss on the GPU (ops/mse.h): dy and a sum per piece in one pass, then the pieces' sums in
// order and the mean in one block. Device pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fp8kit::cuda {

// partials: (n + piece - 1) / piece floats of scratch. dy may be y.
void mse_loss(const float* y, const float* target, int64_t n, int64_t piece, float factor, float* partials,
              float* loss, float* dy, cudaStream_t stream);

}  // namespace fp8kit::cuda
