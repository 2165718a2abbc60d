// Sigmoid output and Keras's binary cross-entropy on probabilities (not logits):
//   loss = mean_b -(y log(pc) + (1 - y) log(1 - pc)),  pc = clip(p, 1e-7, 1 - 1e-7), float32.
// The CPU cores of ops/binary_crossentropy.h (ops/cpu/binary_crossentropy.h says what each computes).
#pragma once

#include "ops/binary_crossentropy.h"
#include "ops/cpu/binary_crossentropy.h"

namespace fp8kit::nn {

using ops::kBceEpsilon;

// p = 1 / (1 + exp(-z)), rounded to bf16 when bf16.
using ops::cpu::sigmoid;
// Mean clipped BCE over the batch.
using ops::cpu::binary_crossentropy;
// dL/dz through the clip (JAX's gradient) and the sigmoid, including the 1 / batch of the mean.
using ops::cpu::binary_crossentropy_sigmoid_backward;

}  // namespace fp8kit::nn
