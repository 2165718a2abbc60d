// Softmax cross-entropy of next-token logits, forward and backward in one pass over each row, on
// Tensors on either device (so the logits' gradient can overwrite the logits: no second [rows, vocab]
// buffer).
#pragma once

#include "ops/context.h"
#include "tensor/tensor.h"

namespace fp8kit::ops {

// logits [rows, vocab] f32, targets [rows] i32 (a negative target: the row is ignored).
// losses [rows] f32 (resized): logsumexp(logits[r]) - logits[r][target] (0 for ignored rows), float32
// math with the row max subtracted (the CPU adds a row's exponentials in double; the GPU in float, a
// block tree: ~1e-6 relative). dlogits (null: forward only) [rows, vocab] f32 (resized; may be
// &logits, overwritten in place): (softmax(logits[r]) - onehot(target)) * grad_scale, zero rows for
// ignored ones; e.g. grad_scale = 1 / (counted rows of the whole batch) for a mean loss.
// Targets outside [0, vocab) other than negative ones throw on the CPU; the GPU treats them as
// ignored (the caller checks ids on the host, where they come from).
void cross_entropy(Context& c, const Tensor& logits, const Tensor& targets, float grad_scale, Tensor& losses,
                   Tensor* dlogits);

}  // namespace fp8kit::ops
