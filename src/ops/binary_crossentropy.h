// The clip of Keras's binary cross-entropy on probabilities, shared by nn/binary_crossentropy.h (CPU)
// and the GPU kernel (ops/cuda/binary_crossentropy.h), so the kernel knows nothing of nn.
#pragma once

namespace fp8kit::ops {

// Probabilities are clipped to [kBceEpsilon, 1 - kBceEpsilon] before the logs.
inline constexpr float kBceEpsilon = 1e-7f;

}  // namespace fp8kit::ops
