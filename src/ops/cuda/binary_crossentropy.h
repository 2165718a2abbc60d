// Sigmoid + clipped binary cross-entropy on the GPU (ops/cpu/binary_crossentropy.h), forward and gradient
// in one launch. Device pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda/linear_epilogue.h"

namespace fp8kit::cuda {

// probs[i] = sigmoid(z[i]) (bf16: rounded); if labels: *loss = mean clipped BCE of probs and
// dz[i] = its gradient through the clip and the sigmoid (ops::cpu::binary_crossentropy_sigmoid_backward).
// batch <= 1024 (one block). loss and dz may be null when labels is null. With epilogue.bias set, z
// [batch, 1] is the output of a one-output Linear whose epilogue is applied first (z[i] = act(z[i] +
// bias[0]), written to epilogue.y when set).
void sigmoid_binary_crossentropy(const float* z, const float* labels, int64_t batch, bool bf16, float* probs,
                                 float* loss, float* dz, cudaStream_t stream, const LinearEpilogue& epilogue = {});

}  // namespace fp8kit::cuda
