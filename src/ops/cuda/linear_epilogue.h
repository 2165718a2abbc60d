// A Linear's bias + activation (the Linear op's epilogue) and its backward, as steps that another kernel
// of the GPU training step applies to its input on the fly, so that they need no launch of their own:
// forward, in the cast or quantization of the next Linear's input (or the output's dropout and
// residual sum); backward, in the cast or quantization of the output gradient for dgrad and wgrad,
// and in the bias gradient's pass.
#pragma once

#include "base/host_device.h"
#include "ops/activation.h"
#include "ops/cuda/dropout.h"
#include "ops/piece_order.h"

#include <cstdint>

namespace fp8kit::cuda {

using ops::Activation;

// x [rows, cols] -> act(x + bias[col]) with the Linear op's rounding: bf16(bf16(x) + bf16(bias)) in
// mixed bf16 (bf16), x + bias in float32, then the activation (GELU's output rounded to bf16 again in
// mixed bf16). Or, with `up` instead of a bias, SwiGLU's gate: x is the gate and the value
// silu(x) up[i] (ops::swiglu_forward's, rounded to bf16 when bf16). Device pointers.
struct LinearEpilogue {
  const float* bias = nullptr;  // [cols]; null: no bias epilogue (x is used as it is, or gated by up)
  Activation activation = Activation::None;
  bool bf16 = false;
  float* y = nullptr;    // [rows, cols] or null: receives act(x + bias) (may be x itself: in place)
  float* pre = nullptr;  // [rows, cols] or null: the activation's input x + bias (GELU's backward reads it)
  const float* up = nullptr;  // [rows, cols] or null: SwiGLU's up (then no bias, y or pre)
  // SwiGlu false: for a kernel that knows no SwiGLU operand reaches it (linear_epilogue<false>).
  template <bool SwiGlu = true>
  FP8KIT_HOST_DEVICE bool active() const { return bias != nullptr || (SwiGlu && up != nullptr); }
};

// The output gradient dy [rows, cols] -> g: back through the dropout that followed the Linear
// (ops::dropout_backward's values, elements indexed row-major; keep probability as in bf16 or float32
// training), then through its activation: ReLU: 0 where !(y > 0) (the Linear op's mask, from the
// forward output y); GELU: times gelu'(pre), pre the activation's input: y itself or, with bias set,
// the Linear epilogue's bias sum of y (x W) as linear_epilogue forms it, recomputed here rather than
// stored by the forward. Or, with swiglu set (no activation or dropout), dy is the gradient of
// SwiGLU's silu(gate) up and g ops::swiglu_backward's dgate (y the gate, up set) or dup (y the
// gate). Device pointers.
struct EpilogueGradient {
  Activation activation = Activation::None;
  const float* y = nullptr;  // [rows, cols]: ReLU, the Linear's forward output; GELU, its input (LinearOp::pre) or x W
  DropoutSite dropout{};     // inactive: no dropout
  bool bf16 = false;         // mixed bf16: the dropout's keep probability, and the rounding of pre's sum
  ops::SwiGluPart swiglu = ops::SwiGluPart::None;
  const float* up = nullptr;    // [rows, cols]: SwiGLU's up, for the gate's gradient
  const float* bias = nullptr;  // [cols], GELU only: y is x W, pre its sum with this bias
  bool active() const { return activation != Activation::None || dropout.active || swiglu != ops::SwiGluPart::None; }
};

// A Linear's bias gradient summed by the cast of its output gradient, which reads dy anyway: grad
// [cols] = the sums over rows of gradient(dy) in `order`, bias_backward's bits (one pass over dy and
// the activation's input fewer). workspace: bias_backward_workspace(rows, cols, order) floats of
// device scratch. The casts sum in their own pass where cast_sums_bias allows it and their tile
// takes it, and otherwise queue bias_backward after themselves.
struct BiasSum {
  float* grad = nullptr;  // [cols] or null: no bias gradient
  ops::PieceOrder order{};
  float* workspace = nullptr;
};

// The tile rows a cast that sums a bias gradient walks a piece in.
constexpr int64_t kBiasSumTileRows = 64;
// Whether the casts sum a bias gradient of a [rows, cols] f32 gradient in their own pass (large
// tensors, pieces of whole tiles); otherwise bias_backward is the faster.
inline bool cast_sums_bias(int64_t rows, int64_t cols, ops::PieceOrder order) {
  return rows * cols >= (int64_t{1} << 20) && order.rows_per_piece > 0 && order.rows_per_piece % kBiasSumTileRows == 0;
}

// SwiGLU's operands of a cast with epilogue e and gradient g (EpilogueGradient or its kernel form):
// first, the gated epilogue's up or the gradient's gate; second, the gate's gradient's up; null where
// there is none. Casts that can load them 4 at a time beside x do.
struct SwiGluOperands {
  const float* first = nullptr;
  const float* second = nullptr;
};
template <typename Gradient>
FP8KIT_HOST_DEVICE inline SwiGluOperands swiglu_operands(const LinearEpilogue& e, const Gradient& g) {
  if (e.up != nullptr) return {e.up, nullptr};
  if (g.swiglu == ops::SwiGluPart::None) return {};
  return {g.y, g.swiglu == ops::SwiGluPart::Gate ? g.up : nullptr};
}

}  // namespace fp8kit::cuda

#if defined(__CUDACC__)
#include <string>

#include "base/error.h"
#include "ops/cuda/dropout.cuh"
#include "ops/cuda/round.cuh"
#include "ops/cuda/swiglu.cuh"

namespace fp8kit::cuda {

// The activation's input from x and the bias: bf16(bf16(x) + bf16(bias)) in mixed bf16, else x + bias.
__device__ __forceinline__ float biased(float x, float bias, bool bf16) {
  return bf16 ? round_bf16(round_bf16(x) + round_bf16(bias)) : x + bias;
}

// The epilogue of one value (fmaxf: ReLU(NaN) = 0); pre, when set, receives the activation's input.
__device__ __forceinline__ float linear_epilogue(float x, float bias, Activation activation, bool bf16,
                                                 float* pre = nullptr) {
  const float v = biased(x, bias, bf16);
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

// The epilogue of an element in column col of e's tensor; u: up's element there when gated (the
// caller loads it, 4 at a time where it can). pre, when set, receives the activation's input.
// SwiGlu false, with active<false>() and EpilogueGradientArgs::activation_gradient: a cast kernel that
// knows no SwiGLU operand reaches it keeps SwiGLU's branches out of every element's path (there they
// had slowed the lab MLP's GELU casts by 45-70%, quantize.cu's large tile and convert.cu's casts alike).
template <bool SwiGlu = true>
__device__ __forceinline__ float linear_epilogue(const LinearEpilogue& e, float x, float u, int64_t col, float* pre) {
  if constexpr (SwiGlu) {
    if (e.up != nullptr) return maybe_bf16(swiglu_value(x, u), e.bf16);
  }
  return linear_epilogue(x, e.bias[col], e.activation, e.bf16, pre);
}

// EpilogueGradient as a kernel argument (epilogue_gradient_args).
struct EpilogueGradientArgs {
  Activation activation = Activation::None;
  const float* y = nullptr;
  DropoutArgs dropout{};
  ops::SwiGluPart swiglu = ops::SwiGluPart::None;
  const float* up = nullptr;
  const float* bias = nullptr;
  bool bf16 = false;

  // g at element i (row-major index, column col) from dy there; mask: dropout.mask(), derived once
  // per thread.
  __device__ float operator()(float dy, int64_t i, int64_t col, const DeviceDropoutMask& mask) const {
    if (swiglu != ops::SwiGluPart::None)
      return swiglu_gradient(dy, y[i], swiglu == ops::SwiGluPart::Gate ? up[i] : 0.0f);
    return activation_gradient(dy, i, col, mask);
  }
  // The same for a gradient without a SwiGLU part (see linear_epilogue<false>).
  __device__ float activation_gradient(float dy, int64_t i, int64_t col, const DeviceDropoutMask& mask) const {
    return with_y(dy, activation != Activation::None ? y[i] : 0.0f, i, col, mask);
  }
  // SwiGLU's gradient with the gate and up elements given (read by the caller; up only for the gate's).
  __device__ float swiglu_gradient(float dy, float gate, float up_value) const {
    return swiglu == ops::SwiGluPart::Gate ? swiglu_gate_gradient(gate, up_value, dy) : swiglu_up_gradient(gate, dy);
  }
  // The same with y[i] given (read by the caller; ignored without an activation).
  __device__ float with_y(float dy, float y_i, int64_t i, int64_t col, const DeviceDropoutMask& mask) const {
    if (activation == Activation::Relu && !(y_i > 0.0f)) return 0.0f;
    const float g = dropout.backward(dy, static_cast<uint32_t>(i), mask);
    if (activation != Activation::Gelu) return g;
    return __fmul_rn(g, ops::gelu_grad(bias != nullptr ? biased(y_i, bias[col], bf16) : y_i));
  }
};

// Checks an op's epilogue and epilogue gradient (naming `what`): the epilogue's output y needs its
// bias, and an op applies one of the two at most.
inline void check_epilogue(const LinearEpilogue& e, const EpilogueGradient& g, const std::string& what) {
  if (e.bias == nullptr && (e.y != nullptr || e.pre != nullptr))
    throw Error(what + ": an epilogue output y or pre needs the epilogue's bias");
  if (e.bias != nullptr && e.up != nullptr) throw Error(what + ": a bias epilogue and a SwiGLU gate together");
  if (e.active() && g.active()) throw Error(what + ": an epilogue and an epilogue gradient together");
}

// Checks `g` for a [rows, cols] tensor (naming `what`) and resolves its dropout.
inline EpilogueGradientArgs epilogue_gradient_args(const EpilogueGradient& g, int64_t rows, int64_t cols,
                                                   const char* what) {
  if (g.activation != Activation::None && g.y == nullptr)
    throw Error(std::string(what) + ": the activation's backward needs y (ReLU: the output; GELU: its input)");
  if (g.swiglu != ops::SwiGluPart::None &&
      (g.activation != Activation::None || g.dropout.active || g.y == nullptr ||
       (g.swiglu == ops::SwiGluPart::Gate && g.up == nullptr)))
    throw Error(std::string(what) + ": SwiGLU's gradient needs the gate (and for the gate's, up), without an "
                "activation or dropout");
  if (g.bias != nullptr && g.activation != Activation::Gelu)
    throw Error(std::string(what) + ": a gradient's bias (GELU's input recomputed from x W) needs GELU");
  return {g.activation, g.y, dropout_args(g.dropout, g.bf16, what, rows * cols), g.swiglu, g.up, g.bias, g.bf16};
}

}  // namespace fp8kit::cuda
#endif
