// Parameter initialisation on the tensor's own device, the same bits on the CPU and the GPU: random
// models (benchmarks of 8B parameters) built on the GPU without a CPU pass.
#pragma once

#include "ops/context.h"
#include "tensor/tensor.h"

#include <cstdint>

namespace fp8kit::ops {

// t (f32 or bf16, on c's device) = normal(0, stddev) values: element i is
// ops/normal_value.h's value(seed, i) * stddev (bf16: rounded to nearest even). One pass.
void fill_normal(Context& c, Tensor& t, float stddev, uint64_t seed);

}  // namespace fp8kit::ops
