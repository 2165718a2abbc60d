// Sigmoid + Keras's clipped binary cross-entropy on Tensors (CPU: ops/cpu/binary_crossentropy.h; GPU:
// ops/cuda/binary_crossentropy.h), and the clip both share, so that the kernel knows nothing of nn.
#pragma once

namespace fp8kit {
class Tensor;
}

namespace fp8kit::ops {

// Probabilities are clipped to [kBceEpsilon, 1 - kBceEpsilon] before the logs.
inline constexpr float kBceEpsilon = 1e-7f;

class Context;
struct LinearOp;

// z [batch] or [batch, 1] (f32 logits; a one-output Linear's) -> probs [batch] = sigmoid(z), rounded to
// bf16 when bf16. With labels [batch] (f32, 0 or 1): loss [1] = the mean clipped BCE of probs, kept on
// the device, and dz (z's shape) = its gradient through the clip and the sigmoid (1 / batch included).
// Without labels (evaluation) loss and dz are neither checked nor written. Outputs are resized. GPU:
// one block (batch <= 1024); CUDA's expf/logf and a warp-tree loss sum: within ~1e-6 relative of the
// CPU (probs: within a bf16 rounding step under bf16).
// producer: z is the deferred output of this one-output Linear: its bias and activation are applied
// to z first (in the same launch on the GPU).
void sigmoid_binary_crossentropy(Context& c, const Tensor& z, const Tensor* labels, bool bf16, Tensor& probs,
                                 Tensor& loss, Tensor& dz, LinearOp* producer = nullptr);

}  // namespace fp8kit::ops
