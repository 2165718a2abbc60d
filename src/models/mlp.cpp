// The lab's MLP: its layers, a training step written once for both devices, and inference.
#include "models/mlp.h"

#include "base/error.h"
#include "nn/init.h"
#include "numerics/cast.h"
#include "numerics/scale.h"
#include "ops/linear.h"
#include "ops/matmul.h"
#include "ops/mse.h"
#include "ops/quantize.h"
#include "ops/tensor_checks.h"

#include <cmath>
#include <random>

namespace fp8kit::models {

namespace {

// A bf16 copy of an f32 tensor, on `device` (made on the host: inference's operands, once).
Tensor bf16_copy(const Tensor& t, Device device) {
  const Tensor host = t.to(Device::Cpu);
  Tensor out(host.shape(), DType::Bf16);
  const std::span<const float> in = host.span<float>();
  const std::span<uint16_t> bits = out.span<uint16_t>();
  for (size_t i = 0; i < in.size(); ++i) bits[i] = float_to_bf16(in[i]);
  return out.to(device);
}

// The amax of a tensor on any device (a per-tensor quantization's, read back to the host).
float amax_of(const Tensor& t) {
  const QTensor q = ops::quantize(t, {.format = Fp8Format::E4M3});
  return q.amax.to(Device::Cpu).data<float>()[0];
}

constexpr QuantSpec kE4m3PerTensor{.format = Fp8Format::E4M3};

}  // namespace

Mlp::Mlp(const MlpConfig& config, uint64_t seed, Device device, const optim::AdamOptions& adam)
    : config_(config),
      context_(device, seed),
      fc1_(parameters_, "fc1", config.input, config.hidden, nn::Activation::Gelu),
      fc2_(parameters_, "fc2", config.hidden, config.output, nn::Activation::None) {
  FP8KIT_CHECK(config.input > 0 && config.hidden > 0 && config.output > 0, "mlp: sizes must be positive, got {} {} {}",
               config.input, config.hidden, config.output);
  parameters_.allocate(Device::Cpu);
  std::mt19937_64 rng(seed);
  for (nn::Parameter* p : parameters_.parameters()) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(p->name.starts_with("fc1") ? config.input : config.hidden));
    nn::fill_uniform(p->value.span<float>(), -bound, bound, rng);
  }
  if (device != Device::Cpu) parameters_.allocate(device);
  adam_.emplace(parameters_, adam);
  set_precision(nn::Precision::Fp32);
}

void Mlp::set_precision(nn::Precision precision, const Fp8Recipe& recipe) {
  precision_ = precision;
  scaling_.reset();
  if (precision == nn::Precision::Fp8) scaling_.emplace(recipe);
  ops::ScalingTable* table = scaling_ ? &*scaling_ : nullptr;
  fc1_.set_precision(precision, table);
  fc2_.set_precision(precision, table);
  if (table != nullptr) table->allocate(context_.device());
  inference_ready_ = false;
}

void Mlp::train_step(const Tensor& x, const Tensor& target) {
  ops::Context& c = context_;
  ops::LinearOp* linears[] = {&fc1_.op(), &fc2_.op()};
  ops::linear_prepare_weights(c, linears, true);
  // fc1's bias and GELU ride in fc2's input cast (on the GPU the backward forms GELU's input again).
  const Tensor& hidden = fc1_.forward(c, x, true, {.deferred = true});
  const Tensor& y = fc2_.forward(c, hidden, true, {}, &fc1_);
  ops::mse_loss(c, y, target, loss_, dy_);
  // fc1's backward without dx: x is data, whose gradient nothing reads (PyTorch skips it likewise).
  const ops::LinearGradient g1{.linear = &fc1_.op(), .dy = &fc2_.backward(c, dy_), .input_gradient = false};
  ops::linear_backward(c, {&g1, 1});
  c.join_all();  // the weight gradients (side lane) before the optimizer
  if (scaling_) {
    c.fork(ops::Lane::Side);
    const ops::Context::OnLane side(c, ops::Lane::Side);
    scaling_->update(c);
  }
  adam_->step(c);
}

void Mlp::prepare_inference(const Tensor& calibration) {
  FP8KIT_CHECK(precision_ != nn::Precision::Fp32, "mlp inference runs in bf16 or fp8; set_precision first");
  const Device device = context_.device();
  nn::Linear* layers[] = {&fc1_, &fc2_};
  for (int i = 0; i < 2; ++i) {
    w_bf16_[i] = bf16_copy(layers[i]->kernel.value, device);
    b_bf16_[i] = bf16_copy(layers[i]->bias->value, device);
  }
  const nn::Precision precision = precision_;
  precision_ = nn::Precision::Bf16;  // calibration: a bf16 forward
  inference_ready_ = true;
  Tensor y;
  infer(calibration, y);
  context_.synchronize();
  precision_ = precision;
  if (precision_ != nn::Precision::Fp8) return;
  const float amaxes[] = {amax_of(calibration), amax_of(act_bf16_)};
  for (int i = 0; i < 2; ++i) {
    w_q_[i] = ops::quantize(layers[i]->kernel.value, kE4m3PerTensor);  // current per-tensor scales
    activation_scales_[i] = current_scale(amaxes[i], Fp8Format::E4M3);
    x_scale_[i] = Tensor({1}, DType::F32);
    x_scale_[i].data<float>()[0] = activation_scales_[i];
    x_scale_[i] = x_scale_[i].to(device);
  }
  // fc2's operand as fc1's epilogue writes it: codes at fc2's input scale, read back with its inverse.
  act_q_ = QTensor();
  act_q_.spec = kE4m3PerTensor;
  act_q_.scale_inv = Tensor({1}, DType::F32);
  act_q_.scale_inv.data<float>()[0] = 1.0f / activation_scales_[1];
  act_q_.scale_inv = act_q_.scale_inv.to(device);
}

void Mlp::infer(const Tensor& x, Tensor& y) {
  FP8KIT_CHECK(inference_ready_, "mlp: call prepare_inference before infer");
  ops::Context& c = context_;
  FP8KIT_CHECK(x.rank() == 2 && x.dim(1) == config_.input, "mlp: the input must be [rows, {}] bf16", config_.input);
  const int64_t rows = x.dim(0);
  ops::sized(y, {rows, config_.output}, DType::Bf16, c.device());
  // fc1's bias and GELU in its GEMM's epilogue, which writes fc2's operand (bf16, or E4M3 codes at
  // fc2's static input scale): no pass over the hidden activation of its own. FP8's fc1 quantizes x at
  // its static scale inside the product (on the GPU, as its blocks load x's rows).
  if (precision_ == nn::Precision::Fp8) {
    ops::sized(act_q_.codes, {rows, config_.hidden}, DType::E4M3, c.device());
    ops::matmul(c, x, x_scale_[0], w_q_[0], act_q_.codes,
                {.bias = &b_bf16_[0], .activation = ops::Activation::Gelu, .y_scale = &x_scale_[1], .fast_accumulation = true});
    ops::matmul(c, act_q_, w_q_[1], y, {.bias = &b_bf16_[1], .fast_accumulation = true});
    return;
  }
  ops::sized(act_bf16_, {rows, config_.hidden}, DType::Bf16, c.device());
  ops::matmul(c, x, w_bf16_[0], act_bf16_, {.bias = &b_bf16_[0], .activation = ops::Activation::Gelu});
  ops::matmul(c, act_bf16_, w_bf16_[1], y, {.bias = &b_bf16_[1]});
}

}  // namespace fp8kit::models
