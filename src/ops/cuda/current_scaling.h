// FP8 current scaling on the GPU: each tensor's scale from its own amax, computed on the device with
// numerics/scale.h's current_scale (the same float operations, so the same bits), so that a captured
// training step needs no round trip to the host between the amax pass and the cast.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "numerics/scale.h"

namespace fp8kit::cuda {

// For each i in `tensors`: scale[i] = current_scale(amax[i], format of i, options) with fp8_max[i] the
// format's largest value, and scale_inv[i * scale_inv_stride] = 1 / scale[i] (ScalingState::scale_inv).
// Device arrays; one launch per 32 indices on `stream`.
void current_scales(std::span<const int> tensors, const float* amax, const float* fp8_max, ScaleOptions options,
                    float* scale, float* scale_inv, int64_t scale_inv_stride, cudaStream_t stream);

}  // namespace fp8kit::cuda
