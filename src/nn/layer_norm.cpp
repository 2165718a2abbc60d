// LayerNorm on the layer_norm ops.
#include "nn/layer_norm.h"

#include "ops/layer_norm.h"

namespace fp8kit::nn {

LayerNorm::LayerNorm(ParameterSet& parameters, const std::string& path, int64_t dim, float epsilon)
    : gamma(parameters.add(path + "/gamma", {dim}, 1.0f)), beta(parameters.add(path + "/beta", {dim})),
      epsilon_(epsilon) {}

const Tensor& LayerNorm::forward(ops::Context& c, const Tensor& x, bool bf16) {
  x_ = &x;
  ops::layer_norm_forward(c, x, gamma.value, beta.value, epsilon_, bf16, out_, mean_, rstd_);
  return out_;
}

const Tensor& LayerNorm::backward(ops::Context& c, const Tensor& dy, const Tensor* dy2) {
  params_backward(c, dy, dy2);
  ops::layer_norm_backward_dx(c, *x_, gamma.value, mean_, rstd_, dy, dy2, dx_);
  return dx_;
}

void LayerNorm::backward(ops::Context& c, const Tensor& dy, const Tensor& residual, Tensor& out) {
  params_backward(c, dy, nullptr);
  ops::layer_norm_backward_dx(c, *x_, gamma.value, mean_, rstd_, dy, nullptr, out, &residual);
}

void LayerNorm::params_backward(ops::Context& c, const Tensor& dy, const Tensor* dy2) {
  c.fork(ops::Lane::Side);
  const ops::Context::OnLane side(c, ops::Lane::Side);
  ops::layer_norm_backward_params(c, *x_, mean_, rstd_, dy, dy2, gamma.grad, beta.grad);
}

}  // namespace fp8kit::nn
