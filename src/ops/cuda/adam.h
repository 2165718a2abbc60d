// Adam on the GPU, exactly optim::Adam's float32 arithmetic (Keras 3's update and bias correction,
// AdamW's decay, the schedule), in one launch over parameters stored contiguously. Device pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/adam.h"

namespace fp8kit::cuda {

// t = *iterations + 1; lr_t = ops::scheduled_learning_rate(options, t); alpha = lr_t sqrt(1 - b2^t) /
// (1 - b1^t); per element w *= 1 - lr_t weight_decay; m += (g - m)(1 - b1); v += (g^2 - v)(1 - b2);
// w -= alpha m / (sqrt(v) + eps); then *iterations = t.
// iterations lives in device memory (a captured graph replays with the current count). step_counter:
// null, or a device counter that advances with iterations (a training step's dropout step), in the
// same small launch. Elements from `decayed` on take no weight decay.
void adam_step(const ops::AdamOptions& options, float* iterations, float* w, const float* g, float* m, float* v,
               int64_t n, int64_t decayed, cudaStream_t stream, uint64_t* step_counter = nullptr);

}  // namespace fp8kit::cuda
