// LayerNorm layer: parameters and buffers around the CPU core of ops/layer_norm (ops/cpu/layer_norm.h).
#include "nn/layer_norm.h"

#include "base/error.h"
#include "ops/cpu/layer_norm.h"

namespace fp8kit::nn {

LayerNorm::LayerNorm(std::string path, int64_t dim, float epsilon) : dim_(dim), epsilon_(epsilon) {
  gamma = {path + "/gamma", {dim}, std::vector<float>(dim, 1.0f), std::vector<float>(dim)};
  beta = {path + "/beta", {dim}, std::vector<float>(dim, 0.0f), std::vector<float>(dim)};
}

std::span<const float> LayerNorm::forward(std::span<const float> x, int64_t rows, bool bf16) {
  FP8KIT_CHECK(static_cast<int64_t>(x.size()) == rows * dim_, "LayerNorm input has {} values, expected {} x {}",
               x.size(), rows, dim_);
  x_ = x.data();
  rows_ = rows;
  out_.resize({rows, dim_});
  mean_.resize({rows});
  rstd_.resize({rows});
  ops::cpu::layer_norm_forward(rows, dim_, epsilon_, x_, gamma.value.data(), beta.value.data(), bf16,
                               out_.data<float>(), mean_.data<float>(), rstd_.data<float>());
  return out_.span<float>();
}

std::span<const float> LayerNorm::backward(std::span<const float> dout) {
  FP8KIT_CHECK(static_cast<int64_t>(dout.size()) == rows_ * dim_, "LayerNorm gradient has {} values, expected {}",
               dout.size(), rows_ * dim_);
  dx_.resize({rows_, dim_});
  ops::cpu::layer_norm_backward_dx(rows_, dim_, x_, gamma.value.data(), mean_.data<float>(), rstd_.data<float>(),
                                   dout.data(), nullptr, dx_.data<float>());
  ops::cpu::layer_norm_backward_params(rows_, dim_, x_, mean_.data<float>(), rstd_.data<float>(), dout.data(), nullptr,
                                       gamma.grad.data(), beta.grad.data());
  return dx_.span<float>();
}

}  // namespace fp8kit::nn
