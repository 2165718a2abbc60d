// A Linear's bias + activation (the Linear op's epilogue) and its backward, as steps that another kernel
// of the GPU training step applies to its input on the fly, so that they need no launch of their own:
// forward, in the cast or quantization of the next Linear's input (or the output's dropout and
// residual sum); backward, in the cast or quantization of the output gradient for dgrad and wgrad,
// and in the bias gradient's pass.
#pragma once

#include "ops/cuda/dropout.h"

namespace fp8kit::cuda {

// x [rows, cols] -> act(x + bias[col]) with the Linear op's rounding: bf16(bf16(x) + bf16(bias)) in
// mixed bf16 (bf16), x + bias in float32, then ReLU when relu. Device pointers.
struct LinearEpilogue {
  const float* bias = nullptr;  // [cols]; null: no epilogue (x is used as it is)
  bool relu = false;
  bool bf16 = false;
  float* y = nullptr;  // [rows, cols] or null: receives act(x + bias) (may be x itself: in place)
};

// The output gradient dy [rows, cols] -> g = relu && !(y > 0) ? 0 : dropout_backward(dy): back
// through the dropout that followed the Linear (ops::dropout_backward's values, elements indexed
// row-major; keep probability as in bf16 or float32 training) and its ReLU (the Linear op's mask, from
// the forward output y). Device pointers.
struct EpilogueGradient {
  bool relu = false;
  const float* y = nullptr;  // [rows, cols], the Linear's forward output; read only when relu
  DropoutSite dropout{};     // inactive: no dropout
  bool bf16 = false;
  bool active() const { return relu || dropout.active; }
};

}  // namespace fp8kit::cuda

#if defined(__CUDACC__)
#include <string>

#include "base/error.h"
#include "ops/cuda/dropout.cuh"
#include "ops/cuda/round.cuh"

namespace fp8kit::cuda {

// The epilogue of one value (fmaxf: ReLU(NaN) = 0).
__device__ __forceinline__ float linear_epilogue(float x, float bias, bool relu, bool bf16) {
  const float v = bf16 ? round_bf16(round_bf16(x) + round_bf16(bias)) : x + bias;
  return relu ? fmaxf(v, 0.0f) : v;
}

// EpilogueGradient as a kernel argument (epilogue_gradient_args).
struct EpilogueGradientArgs {
  bool relu = false;
  const float* y = nullptr;
  DropoutArgs dropout{};

  // g at element i (row-major index) from dy there; mask: dropout.mask(), derived once per thread.
  __device__ float operator()(float dy, int64_t i, const DeviceDropoutMask& mask) const {
    return with_y(dy, relu ? y[i] : 0.0f, i, mask);
  }
  // The same with y[i] given (read by the caller; ignored without ReLU).
  __device__ float with_y(float dy, float y_i, int64_t i, const DeviceDropoutMask& mask) const {
    return relu && !(y_i > 0.0f) ? 0.0f : dropout.backward(dy, static_cast<uint32_t>(i), mask);
  }
};

// Checks an op's epilogue and epilogue gradient (naming `what`): the epilogue's output y needs its
// bias, and an op applies one of the two at most.
inline void check_epilogue(const LinearEpilogue& e, const EpilogueGradient& g, const std::string& what) {
  if (e.bias == nullptr && e.y != nullptr) throw Error(what + ": an epilogue output y needs the epilogue's bias");
  if (e.bias != nullptr && g.active()) throw Error(what + ": an epilogue and an epilogue gradient together");
}

// Checks `g` for a [rows, cols] tensor (naming `what`) and resolves its dropout.
inline EpilogueGradientArgs epilogue_gradient_args(const EpilogueGradient& g, int64_t rows, int64_t cols,
                                                   const char* what) {
  if (g.relu && g.y == nullptr) throw Error(std::string(what) + ": the ReLU mask needs the forward output y");
  return {g.relu, g.y, dropout_args(g.dropout, g.bf16, what, rows * cols)};
}

}  // namespace fp8kit::cuda
#endif
