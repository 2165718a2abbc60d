// Linear layer y = act(x W + b) with a precision policy (the Keras Dense / EinsumDense of the seed):
//   Fp32: float32 GEMMs.
//   Bf16: x, W (and dy in the backward) rounded to bf16, float32 accumulation, output rounded to bf16.
//   Fp8:  y = q(x) q(W) with E4M3 inputs and weights, dx = q(dy) q(W)^T and dW = q(x)^T q(dy) with
//         E5M2 gradients; float32 accumulation exactly as ops::gemm_fp8 (codes decoded, products
//         summed in float32, the sum times the two scale_invs); per-tensor scales from
//         fp8kit::ScalingState (delayed with the te or keras lag, or current); gradients pass
//         straight through the quantizers; the bias gradient and the ReLU mask use the unquantized
//         dy; output rounded to bf16 (Keras's float8_from_mixed_bfloat16). Each scaling state is
//         updated once per training forward (inputs, kernel) and backward (outputs_grad).
#pragma once

#include "nn/parameter.h"
#include "nn/precision.h"
#include "numerics/recipe.h"
#include "ops/piece_order.h"
#include "tensor/tensor.h"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace fp8kit::nn {

enum class Activation { None, Relu };

// The three scaled tensors of an FP8 Linear.
struct Fp8LinearScaling {
  ScalingState inputs, kernel, outputs_grad;
};

class Linear {
 public:
  // The order of backward()'s bias gradient sum over rows (GPU twins pass it to their op to match).
  static constexpr ops::PieceOrder kBiasGradientOrder{512};

  // path: the Keras layer path ("transformer_decoder/self_attention/query"); the parameters are
  // <path>/kernel (Keras's kernel_shape, laid out as [in, out] row-major) and <path>/bias (bias_shape).
  Linear(std::string path, int64_t in, int64_t out, std::vector<int64_t> kernel_shape,
         std::vector<int64_t> bias_shape, Activation activation);

  // Fp8 resets the scaling state (scales 1, histories 0) with the recipe's history length.
  void set_precision(Precision precision, const Fp8Recipe& recipe = {});
  Precision precision() const { return precision_; }

  // x: [rows, in], must stay valid and unchanged until backward(). Returns y [rows, out], valid
  // until the next forward. !training: FP8 scales are frozen (the scale the next training step
  // would use, state untouched).
  std::span<const float> forward(std::span<const float> x, int64_t rows, bool training);
  // dy: [rows, out] of the last forward (which must have been training). Overwrites kernel.grad and
  // bias.grad; returns dx [rows, in], valid until the next backward.
  std::span<const float> backward(std::span<const float> dy);

  const std::string& path() const { return path_; }
  std::string name() const;  // last component of the path ("query")
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

  Parameter kernel, bias;

  // Fp8 only: <path>/{inputs,kernel,outputs_grad}_{scale,amax_history}. The scale entry is the
  // state's `scale` (TE convention, multiplies before the cast) in te lag and current scaling, and
  // Keras's dequantization multiplier `keras_multiplier` in keras lag: in each case the value the
  // next step really uses, so restoring these views restores the scaling exactly.
  std::vector<StateEntry> fp8_state();
  const Fp8LinearScaling& fp8_scaling() const { return scaling_; }
  // The scale_invs the last FP8 forward (inputs, kernel) and backward (outputs_grad) quantized with.
  struct UsedScaleInvs {
    float inputs = 0, kernel = 0, outputs_grad = 0;
  };
  const UsedScaleInvs& used_scale_invs() const { return used_; }
  // The FP8 codes of the last forward / backward: [rows, in] E4M3, [in, out] E4M3, [rows, out] E5M2.
  const Tensor& quantized_inputs() const { return xq_; }
  const Tensor& quantized_kernel() const { return wq_; }
  const Tensor& quantized_outputs_grad() const { return gq_; }

 private:
  float quantize(ScalingState& state, Fp8Format format, std::span<const float> x, bool training, Tensor& out);

  std::string path_;
  int64_t in_, out_;
  Activation activation_;
  Precision precision_ = Precision::Fp32;
  Fp8Recipe recipe_;
  Fp8LinearScaling scaling_;
  ScalingState frozen_;  // scratch copy for evaluation, so the real state stays untouched
  UsedScaleInvs used_;

  const float* x_ = nullptr;  // the forward's input (fp32 policy)
  int64_t rows_ = 0;
  Tensor y_, dx_, dy_;        // [rows, out], [rows, in], [rows, out] (dy after the ReLU mask)
  Tensor x_bf16_, w_bf16_;    // bf16 policy: rounded operands
  Tensor xq_, wq_, gq_;       // fp8 policy: codes
  Tensor x_values_, w_values_, g_values_;  // and their exact (unscaled) values, decoded once
  Tensor bias_partials_;                   // [pieces of rows, out] partial bias gradients
};

}  // namespace fp8kit::nn
