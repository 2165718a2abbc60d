// The mean squared error of a regression output (PyTorch's F.mse_loss, reduction "mean"), on Tensors
// on either device: loss = sum over all n elements of (y - t)^2, divided by n, and its gradient
// dy = (y - t) (2 / n). The sum is float32 in fixed pieces of kMsePiece elements, then over the pieces;
// the CPU sums element by element in order, the GPU as trees, so the loss agrees within fp32
// summation order (~1e-5 relative) and is the same bits every run on each device; dy is bit for bit.
#pragma once

#include "ops/context.h"
#include "tensor/tensor.h"

namespace fp8kit::ops {

inline constexpr int64_t kMsePiece = 4096;

// y, target: f32 of one shape on c's device (n >= 1 elements). loss [1] and dy (y's shape) are resized;
// dy may be y itself (each element is read before it is written).
void mse_loss(Context& c, const Tensor& y, const Tensor& target, Tensor& loss, Tensor& dy);

}  // namespace fp8kit::ops
