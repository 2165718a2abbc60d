// Linear layer y = act(x W + b) in the precision it is given, on the model's device: ops/linear.h says
// what each precision computes. Its shapes: Keras's Dense / EinsumDense (the seed model: kernel
// [in, out] row-major, a bias) and PyTorch's / Hugging Face's nn.Linear (weight [out, in]): without
// bias (the Llama model) or with one (the lab's MLP).
#pragma once

#include "nn/parameter.h"
#include "nn/precision.h"
#include "ops/linear.h"
#include "ops/scaling_table.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace fp8kit::nn {

using Activation = ops::Activation;  // None, Relu, Gelu

class Linear {
 public:
  // path: the Keras layer path ("transformer_decoder/self_attention/query"); the parameters are
  // <path>/kernel (Keras's kernel_shape, laid out as [in, out] row-major) and <path>/bias (bias_shape).
  Linear(ParameterSet& parameters, std::string path, int64_t in, int64_t out, std::vector<int64_t> kernel_shape,
         std::vector<int64_t> bias_shape, Activation activation);
  // HF: the parameter <name>.weight [out, in] ("model.layers.0.mlp.up_proj.weight"), no bias.
  Linear(ParameterSet& parameters, std::string name, int64_t in, int64_t out);
  // PyTorch's nn.Linear with its bias: <name>.weight [out, in] and <name>.bias [out] ("fc1.weight").
  Linear(ParameterSet& parameters, std::string name, int64_t in, int64_t out, Activation activation);
  // HF with a tied weight: another layer's parameter [out, in] (the token embedding's, for a tied LM
  // head). Its gradient from this Linear goes to tied_grad(), for the model to add to the parameter's.
  Linear(Parameter& tied_weight, std::string name, int64_t in, int64_t out);

  // Fp8 takes three slots of the model's scaling table (before its allocation):
  // <path>/{inputs,kernel,outputs_grad}, cast to the recipe's forward, forward and backward formats,
  // scaled as `mode` says (default: the table recipe's mode); in block mode, none: the op's Fp8Block
  // precision, current block scales.
  void set_precision(Precision precision, ops::ScalingTable* scaling, std::optional<ScalingMode> mode = std::nullopt);

  // x: [rows, in] on the model's device (f32 or bf16: ops::linear_forward), unchanged until backward(). Returns y [rows, out]; `next`:
  // what follows in the model (dropout, residual sum, into next.out; or deferred, for a consumer
  // Linear to apply). producer: the Linear whose deferred output x is.
  const Tensor& forward(ops::Context& c, const Tensor& x, bool training, const ops::LinearOutput& next = {},
                        Linear* producer = nullptr);
  // The same from SwiGLU's gate (ops::GatedInput: silu(gate) up, fused into the input's cast on the GPU).
  const Tensor& forward(ops::Context& c, const ops::GatedInput& x, bool training, const ops::LinearOutput& next = {});
  // dy: [rows, out] (f32 or bf16), the gradient of y or, with an active dropout, of the dropout after
  // it. Overwrites the parameters' gradients (weight gradients on Lane::Side); returns dx [rows, in],
  // in *dx_bf16 as bf16 when given (ops::LinearGradient::dx_bf16).
  const Tensor& backward(ops::Context& c, const Tensor& dy, const ops::DropoutSpec& dropout = {},
                         Tensor* dx_bf16 = nullptr);

  const std::string& path() const { return path_; }
  std::string name() const;  // last component of the path ("query", "up_proj")
  int64_t in_features() const { return op_.in; }
  int64_t out_features() const { return op_.out; }
  ops::LinearPrecision precision() const { return op_.precision; }
  // The op with the parameters' current tensors (for ops over several Linears).
  ops::LinearOp& op();
  // A tied Linear's weight gradient (after backward).
  const Tensor& tied_grad() const { return tied_grad_; }
  // The buffer backward() returns dx in, which a model may share between layers (backward_buffers).
  Tensor& dx_buffer() { return op_.dx; }
  // What forward() and backward() write besides dx and the weight's casts: the output, the GEMM
  // operands of the input and the output gradient, scratch. A model that recomputes activations
  // shares them between layers (nothing reads them after this layer's backward has finished).
  std::vector<Tensor*> step_buffers();

  Parameter& kernel;
  Parameter* bias;  // null: none

 private:
  std::string path_;
  ops::LinearOp op_;
  bool tied_ = false;
  Tensor tied_grad_;
};

}  // namespace fp8kit::nn
