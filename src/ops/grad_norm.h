// Gradient clipping by the global L2 norm (PyTorch's clip_grad_norm_) over a model's flat gradient
// buffer, on either device. CPU core: ops/cpu/grad_norm.h; GPU: ops/cuda/grad_norm.h.
#pragma once

#include "ops/context.h"
#include "tensor/tensor.h"

#include <functional>

namespace fp8kit::ops {

// grads: a flat f32 tensor (e.g. nn::ParameterSet::grads()); norm [1] f32 (resized) = the L2 norm of
// grads before clipping: the squares summed in double over fixed pieces of elements, the pieces in
// order (the GPU sums a piece and the pieces in another order, also in double: the same float norm
// but in rare ties). Then, when max_norm > 0, grads *= min(1, max_norm / (norm + 1e-6)) (a NaN norm
// leaves them). GPU: no host sync; the factor is read from norm on the device (a captured step
// replays with the current one); workspace: the lane's scratch.
// A gradient sharded across processes (ZeRO-1): `grads` is this process's shard, and
// reduce_sum_of_squares, given `norm` holding the shard's sum of squares (rounded to float), queues
// its sum over the processes into it (an all-reduce); the norm is then that sum's root, the whole
// gradient's, and the shard is clipped by it.
void clip_by_global_norm(Context& c, Tensor& grads, float max_norm, Tensor& norm,
                         const std::function<void(Tensor& sum_of_squares)>& reduce_sum_of_squares = {});

}  // namespace fp8kit::ops
