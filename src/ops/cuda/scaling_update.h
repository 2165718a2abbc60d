// The delayed-scaling update of many FP8 tensors in one launch: roll every amax history, reduce it,
// compute every new scale, exactly as ScalingState::record_amax + scale_for_step (numerics/recipe.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "numerics/recipe.h"

namespace fp8kit::cuda {

// The scaling states of `count` tensors in device memory, tensor i at index i of every array.
struct ScalingBatch {
  int64_t count = 0;
  int64_t history_length = 0;     // L, the same for all tensors
  float* amax_history = nullptr;  // [count, L], slot 0 = newest (AmaxHistory's layout)
  const float* amax = nullptr;    // [count]: this step's amaxes
  float* scale = nullptr;         // [count]: ScalingState::scale (multiplies before the cast)
  float* scale_inv = nullptr;     // [count]: ScalingState::scale_inv(recipe): 1 / scale, or in keras
                                  // lag Keras's multiplier m (the state itself; scale = 1 / m)
  const float* fp8_max = nullptr;  // [count]: fp8_max of each tensor's format (448 or 57344)
  // [count]: 1 where the tensor scales currently, 0 delayed (a model may mix them); null: every
  // tensor as recipe.mode says.
  const int32_t* current = nullptr;
};

// After a step's amaxes are known, per tensor:
//   te lag:    push amax; scale = delayed_scale(history amax, scale); scale_inv = 1 / scale
//              (what scale_for_step computes at the start of the next step)
//   keras lag: m = keras_scale_multiplier(history amax before the push, m); scale = 1 / m; push
//   current:   push; scale_inv = 1 / scale (the scale came from the tensor's own amax when it was
//              quantized)
// The push honours recipe.skip_zero_amax; the history amax is recipe.amax_algorithm's.
// L is limited to 8192 (the window is staged in shared memory).
void update_scaling(const ScalingBatch& batch, const Fp8Recipe& recipe, cudaStream_t stream = nullptr);

}  // namespace fp8kit::cuda
