// RMSNorm layer (Hugging Face's LlamaRMSNorm): out = x * rstd * weight over the last axis, float32
// statistics; the output is rounded to bf16 under mixed precision.
#pragma once

#include "nn/parameter.h"
#include "ops/context.h"

#include <string>
#include <vector>

namespace fp8kit::nn {

class RmsNorm {
 public:
  // name: the HF module ("model.layers.0.input_layernorm"); the parameter is <name>.weight [dim], 1.
  RmsNorm(ParameterSet& parameters, const std::string& name, int64_t dim, float epsilon);

  // x: [rows, dim], unchanged until backward. Returns [rows, dim].
  const Tensor& forward(ops::Context& c, const Tensor& x, bool bf16);
  // Returns dx; the weight's gradient is overwritten.
  const Tensor& backward(ops::Context& c, const Tensor& dy);
  // out = residual + dx (a pre-norm block's residual stream and its branch, added in the same pass);
  // the weight's gradient is overwritten.
  void backward(ops::Context& c, const Tensor& dy, const Tensor& residual, Tensor& out);

  // What forward() writes for backward() (the output and the statistics), which a model that
  // recomputes activations may share between layers as well.
  std::vector<Tensor*> step_buffers() { return {&out_, &rstd_}; }

  Parameter& weight;

 private:
  float epsilon_;
  const Tensor* x_ = nullptr;
  Tensor out_, dx_, rstd_;
};

}  // namespace fp8kit::nn
