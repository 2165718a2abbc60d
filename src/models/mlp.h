// The MLP of lab 3.2.3 (PyTorch's SimpleMLP: fc1 768 -> 3072 with bias, GELU, fc2 3072 -> 768 with
// bias), trained with MSE and AdamW and served, on the CPU (the exact reference) or a CUDA GPU, in
// fp32, mixed bf16 or FP8 chosen at run time. Training runs the Linear op (ops/linear.h): fc1's output
// is deferred, so fc2's input cast applies fc1's bias and GELU as it reads it (one pass over the
// hidden activation fewer). Inference runs ops::matmul on bf16 operands or on E4M3 codes with
// per-tensor scales, fc1's bias and GELU in its epilogue, which writes fc2's input in its format.
#pragma once

#include "nn/linear.h"
#include "nn/parameter.h"
#include "nn/precision.h"
#include "numerics/recipe.h"
#include "ops/context.h"
#include "ops/scaling_table.h"
#include "optim/adam.h"
#include "tensor/qtensor.h"
#include "tensor/tensor.h"

#include <cstdint>
#include <optional>

namespace fp8kit::models {

struct MlpConfig {
  int64_t input = 768, hidden = 3072, output = 768;
};

// The lab's optimizer: torch.optim.AdamW(lr=1e-4) with PyTorch's defaults.
inline optim::AdamOptions lab_adamw() {
  return {.learning_rate = 1e-4f, .beta1 = 0.9f, .beta2 = 0.999f, .epsilon = 1e-8f, .weight_decay = 0.01f};
}

class Mlp {
 public:
  // Weights and biases uniform(-1/sqrt(in), 1/sqrt(in)) as PyTorch's nn.Linear initialises them, from
  // std::mt19937_64(seed) on the CPU, then on `device`; fp32 until set_precision.
  Mlp(const MlpConfig& config, uint64_t seed, Device device, const optim::AdamOptions& adam = lab_adamw());

  // Resets the FP8 scaling state (a new table for the recipe) and drops the inference operands.
  void set_precision(nn::Precision precision, const Fp8Recipe& recipe = {});
  nn::Precision precision() const { return precision_; }
  const MlpConfig& config() const { return config_; }
  ops::Context& context() { return context_; }
  nn::ParameterSet& parameter_set() { return parameters_; }
  ops::ScalingTable* scaling() { return scaling_ ? &*scaling_ : nullptr; }

  // One training step queued on context() (what exec::CapturedStep captures): x [rows, input] and
  // target [rows, output] f32 on the model's device; forward, MSE, backward, the FP8 scaling update,
  // AdamW. The loss stays on the device (loss(), [1]); lanes may still be busy (Context::join_all).
  void train_step(const Tensor& x, const Tensor& target);
  const Tensor& loss() const { return loss_; }

  // Inference's operands from the current weights: bf16 copies, or (Fp8) E4M3 codes with per-tensor
  // current scales, and static activation scales calibrated on `calibration` ([rows, input] bf16 on
  // the device): the amaxes of fc1's input and of fc2's input (GELU's output) in a bf16 forward,
  // scale = E4M3 max / amax (numerics' current_scale), as TensorRT's max calibration. Queues and waits.
  void prepare_inference(const Tensor& calibration);
  // y [rows, output] bf16 = the MLP of x [rows, input] bf16, on context() (capturable: the same shapes
  // allocate nothing after the first call). Needs prepare_inference.
  void infer(const Tensor& x, Tensor& y);
  // The calibrated activation scales (fc1's input, fc2's input); Fp8 after prepare_inference.
  float input_scale(int linear) const { return activation_scales_[linear]; }

 private:
  MlpConfig config_;
  ops::Context context_;
  nn::ParameterSet parameters_;
  nn::Linear fc1_, fc2_;
  std::optional<optim::Adam> adam_;  // made once the parameters are allocated
  nn::Precision precision_ = nn::Precision::Fp32;
  std::optional<ops::ScalingTable> scaling_;
  Tensor loss_, dy_;
  // Inference: weights [out, in] bf16 or quantized, fc2's input (bf16 or E4M3), input scales [1].
  Tensor w_bf16_[2], b_bf16_[2], act_bf16_, x_scale_[2];
  QTensor w_q_[2], act_q_;
  float activation_scales_[2] = {1.0f, 1.0f};
  bool inference_ready_ = false;
};

}  // namespace fp8kit::models
