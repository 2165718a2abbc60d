// RmsNorm on the rms_norm ops.
#include "nn/rms_norm.h"

#include "ops/rms_norm.h"

namespace fp8kit::nn {

RmsNorm::RmsNorm(ParameterSet& parameters, const std::string& name, int64_t dim, float epsilon)
    : weight(parameters.add(name + ".weight", {dim}, 1.0f, /*decayed=*/false)), epsilon_(epsilon) {}

const Tensor& RmsNorm::forward(ops::Context& c, const Tensor& x, bool bf16) {
  x_ = &x;
  ops::rms_norm_forward(c, x, weight.value, epsilon_, bf16, out_, rstd_);
  return out_;
}

const Tensor& RmsNorm::backward(ops::Context& c, const Tensor& dy) {
  ops::rms_norm_backward(c, *x_, weight.value, rstd_, dy, dx_, weight.grad);
  return dx_;
}

void RmsNorm::backward(ops::Context& c, const Tensor& dy, const Tensor& residual, Tensor& out) {
  ops::rms_norm_backward(c, *x_, weight.value, rstd_, dy, out, weight.grad, &residual);
}

}  // namespace fp8kit::nn
