// A Linear's bias + activation (the Linear op's epilogue) and its backward, as steps that another kernel
// of the GPU training step applies to its input on the fly, so that they need no launch of their own:
// forward, in the cast or quantization of the next Linear's input (or the output's dropout and
// residual sum); backward, in the cast or quantization of the output gradient for dgrad and wgrad,
// and in the bias gradient's pass.
#pragma once

#include "ops/activation.h"
#include "ops/cuda/dropout.h"

namespace fp8kit::cuda {

using ops::Activation;

// x [rows, cols] -> act(x + bias[col]) with the Linear op's rounding: bf16(bf16(x) + bf16(bias)) in
// mixed bf16 (bf16), x + bias in float32, then the activation (GELU's output rounded to bf16 again in
// mixed bf16). Device pointers.
struct LinearEpilogue {
  const float* bias = nullptr;  // [cols]; null: no epilogue (x is used as it is)
  Activation activation = Activation::None;
  bool bf16 = false;
  float* y = nullptr;    // [rows, cols] or null: receives act(x + bias) (may be x itself: in place)
  float* pre = nullptr;  // [rows, cols] or null: the activation's input x + bias (GELU's backward reads it)
};

// The output gradient dy [rows, cols] -> g: back through the dropout that followed the Linear
// (ops::dropout_backward's values, elements indexed row-major; keep probability as in bf16 or float32
// training), then through its activation: ReLU: 0 where !(y > 0) (the Linear op's mask, from the
// forward output y); GELU: times gelu'(pre), pre the activation's input. Device pointers.
struct EpilogueGradient {
  Activation activation = Activation::None;
  const float* y = nullptr;  // [rows, cols]: ReLU, the Linear's forward output; GELU, its input (LinearOp::pre)
  DropoutSite dropout{};     // inactive: no dropout
  bool bf16 = false;
  bool active() const { return activation != Activation::None || dropout.active; }
};

}  // namespace fp8kit::cuda

#if defined(__CUDACC__)
#include <string>

#include "base/error.h"
#include "ops/cuda/dropout.cuh"
#include "ops/cuda/round.cuh"

namespace fp8kit::cuda {

// The epilogue of one value (fmaxf: ReLU(NaN) = 0); pre, when set, receives the activation's input.
__device__ __forceinline__ float linear_epilogue(float x, float bias, Activation activation, bool bf16,
                                                 float* pre = nullptr) {
  const float v = bf16 ? round_bf16(round_bf16(x) + round_bf16(bias)) : x + bias;
  if (pre != nullptr) *pre = v;
  switch (activation) {
    case Activation::Relu:
      return fmaxf(v, 0.0f);
    case Activation::Gelu:
      return maybe_bf16(ops::gelu(v), bf16);
    default:
      return v;
  }
}

// The epilogue of element i of e's tensor (its pre written at i when set).
__device__ __forceinline__ float linear_epilogue(const LinearEpilogue& e, float x, int64_t i, int64_t col) {
  return linear_epilogue(x, e.bias[col], e.activation, e.bf16, e.pre != nullptr ? e.pre + i : nullptr);
}

// EpilogueGradient as a kernel argument (epilogue_gradient_args).
struct EpilogueGradientArgs {
  Activation activation = Activation::None;
  const float* y = nullptr;
  DropoutArgs dropout{};

  // g at element i (row-major index) from dy there; mask: dropout.mask(), derived once per thread.
  __device__ float operator()(float dy, int64_t i, const DeviceDropoutMask& mask) const {
    return with_y(dy, activation != Activation::None ? y[i] : 0.0f, i, mask);
  }
  // The same with y[i] given (read by the caller; ignored without an activation).
  __device__ float with_y(float dy, float y_i, int64_t i, const DeviceDropoutMask& mask) const {
    if (activation == Activation::Relu && !(y_i > 0.0f)) return 0.0f;
    const float g = dropout.backward(dy, static_cast<uint32_t>(i), mask);
    return activation == Activation::Gelu ? __fmul_rn(g, ops::gelu_grad(y_i)) : g;
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
  if (g.activation != Activation::None && g.y == nullptr)
    throw Error(std::string(what) + ": the activation's backward needs y (ReLU: the output; GELU: its input)");
  return {g.activation, g.y, dropout_args(g.dropout, g.bf16, what, rows * cols)};
}

}  // namespace fp8kit::cuda
#endif
