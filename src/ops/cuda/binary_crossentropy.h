// Sigmoid + clipped binary cross-entropy on the GPU (nn/binary_crossentropy.h), forward and gradient
// in one launch. Device pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fp8kit::cuda {

// probs[i] = sigmoid(z[i]) (bf16: rounded); if labels: *loss = mean clipped BCE of probs and
// dz[i] = its gradient through the clip and the sigmoid (nn::binary_crossentropy_sigmoid_backward).
// batch <= 1024 (one block). loss and dz may be null when labels is null.
void sigmoid_binary_crossentropy(const float* z, const float* labels, int64_t batch, bool bf16, float* probs,
                                 float* loss, float* dz, cudaStream_t stream);

}  // namespace fp8kit::cuda
