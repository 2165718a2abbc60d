// A Linear's bias + activation (nn::Linear's epilogue), as a step that a later kernel of the GPU
// training step applies to its input on the fly (the cast or quantization of the next Linear's input,
// the output's dropout and residual sum), so that it needs no launch of its own.
#pragma once

namespace fp8kit::cuda {

// x [rows, cols] -> act(x + bias[col]) with nn::Linear's rounding: bf16(bf16(x) + bf16(bias)) in
// mixed bf16 (bf16), x + bias in float32, then ReLU when relu. Device pointers.
struct LinearEpilogue {
  const float* bias = nullptr;  // [cols]; null: no epilogue (x is used as it is)
  bool relu = false;
  bool bf16 = false;
  float* y = nullptr;  // [rows, cols] or null: receives act(x + bias) (may be x itself: in place)
};

}  // namespace fp8kit::cuda

#if defined(__CUDACC__)
#include "ops/cuda/round.cuh"

namespace fp8kit::cuda {

// The epilogue of one value (fmaxf: ReLU(NaN) = 0).
__device__ __forceinline__ float linear_epilogue(float x, float bias, bool relu, bool bf16) {
  const float v = bf16 ? round_bf16(round_bf16(x) + round_bf16(bias)) : x + bias;
  return relu ? fmaxf(v, 0.0f) : v;
}

}  // namespace fp8kit::cuda
#endif
