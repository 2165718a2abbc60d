// The sigmoid output and Keras's binary cross-entropy on probabilities (not logits), CPU cores on
// float32 spans: the exact reference of ops/binary_crossentropy.h's Tensor op, also nn's
// (nn/binary_crossentropy.h).
//   loss = mean_b -(y log(pc) + (1 - y) log(1 - pc)),  pc = clip(p, 1e-7, 1 - 1e-7), float32.
#pragma once

#include <span>

namespace fp8kit::ops::cpu {

// p = 1 / (1 + exp(-z)), rounded to bf16 when bf16 (a mixed-precision Dense emits bf16).
void sigmoid(std::span<const float> z, bool bf16, std::span<float> p);

// Mean clipped BCE over the batch, summed in batch order.
float binary_crossentropy(std::span<const float> p, std::span<const float> labels);

// dL/dz for p = sigmoid(z): dL/dp times the sigmoid's derivative p (1 - p). The clip's gradient is
// JAX's: 1 strictly inside [eps, 1 - eps], 0 outside (a saturated probability learns nothing), 1/2
// exactly at an end. Includes the 1 / batch of the mean.
void binary_crossentropy_sigmoid_backward(std::span<const float> p, std::span<const float> labels,
                                          std::span<float> dz);

}  // namespace fp8kit::ops::cpu
