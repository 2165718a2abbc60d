// Linear: its parameters, its scaling slots, and the Linear op.
#include "nn/linear.h"

#include "base/error.h"
#include "ops/tensor_checks.h"

namespace fp8kit::nn {

Linear::Linear(ParameterSet& parameters, std::string path, int64_t in, int64_t out, std::vector<int64_t> kernel_shape,
               std::vector<int64_t> bias_shape, Activation activation)
    : kernel(parameters.add(path + "/kernel", std::move(kernel_shape))),
      bias(&parameters.add(path + "/bias", std::move(bias_shape))),
      path_(std::move(path)) {
  FP8KIT_CHECK(numel(kernel.shape) == in * out, "{}: kernel shape has {} elements, expected {} x {}", path_,
               numel(kernel.shape), in, out);
  FP8KIT_CHECK(numel(bias->shape) == out, "{}: bias shape has {} elements, expected {}", path_, numel(bias->shape),
               out);
  op_.in = in;
  op_.out = out;
  op_.activation = activation;
}

Linear::Linear(ParameterSet& parameters, std::string name, int64_t in, int64_t out)
    : kernel(parameters.add(name + ".weight", {out, in})), bias(nullptr), path_(std::move(name)) {
  op_.in = in;
  op_.out = out;
  op_.layout = ops::LinearOp::Layout::OutIn;
}

Linear::Linear(ParameterSet& parameters, std::string name, int64_t in, int64_t out, Activation activation)
    : kernel(parameters.add(name + ".weight", {out, in})),
      bias(&parameters.add(name + ".bias", {out})),
      path_(std::move(name)) {
  op_.in = in;
  op_.out = out;
  op_.layout = ops::LinearOp::Layout::OutIn;
  op_.activation = activation;
}

Linear::Linear(Parameter& tied_weight, std::string name, int64_t in, int64_t out)
    : kernel(tied_weight), bias(nullptr), path_(std::move(name)), tied_(true) {
  FP8KIT_CHECK(kernel.shape == std::vector<int64_t>({out, in}), "{}: the tied weight {} is not [{}, {}]", path_,
               kernel.name, out, in);
  op_.in = in;
  op_.out = out;
  op_.layout = ops::LinearOp::Layout::OutIn;
}

std::string Linear::name() const {
  const size_t end = path_.find_last_of("/.");
  return end == std::string::npos ? path_ : path_.substr(end + 1);
}

void Linear::set_precision(Precision precision, ops::ScalingTable* scaling, std::optional<ScalingMode> mode) {
  FP8KIT_CHECK(precision != Precision::Fp8 || scaling != nullptr, "{}: FP8 needs the model's scaling table", path_);
  const ScalingMode m = precision == Precision::Fp8 ? mode.value_or(scaling->recipe().mode) : ScalingMode::Delayed;
  const bool block = precision == Precision::Fp8 && m == ScalingMode::Block;
  op_.precision = precision == Precision::Fp32   ? ops::LinearPrecision::Fp32
                  : precision == Precision::Bf16 ? ops::LinearPrecision::Bf16
                  : block                        ? ops::LinearPrecision::Fp8Block
                                                 : ops::LinearPrecision::Fp8;
  op_.scaling = nullptr;
  op_.slot = -1;
  if (block) {  // current block scales: nothing in the table
    op_.block_recipe = scaling->recipe();
    op_.block_recipe.mode = ScalingMode::Block;
  } else if (precision == Precision::Fp8) {
    op_.scaling = scaling;
    op_.slot = scaling->add_linear(path_, m);
  }
}

ops::LinearOp& Linear::op() {
  op_.w = &kernel.value;
  op_.dw = &kernel.grad;
  if (tied_) {
    ops::sized(tied_grad_, {op_.out, op_.in}, DType::F32, kernel.value.device());
    op_.dw = &tied_grad_;
  }
  if (bias != nullptr) {
    op_.b = &bias->value;
    op_.db = &bias->grad;
  } else {
    op_.b = nullptr;
    op_.db = nullptr;
  }
  return op_;
}

std::vector<Tensor*> Linear::step_buffers() {
  ops::LinearOp& l = op_;
  std::vector<Tensor*> all = {&l.y, &l.pre, &l.xc, &l.xc_t, &l.g, &l.gc, &l.gc_t, &l.partials, &l.x_f32, &l.dy_f32};
  for (QTensor* q : {&l.xq, &l.xq_t, &l.gq, &l.gq_t})
    for (Tensor* t : {&q->codes, &q->codes_t, &q->scale_inv, &q->amax}) all.push_back(t);
  return all;
}

const Tensor& Linear::forward(ops::Context& c, const Tensor& x, bool training, const ops::LinearOutput& next,
                              Linear* producer) {
  ops::linear_forward(c, op(), x, training, next, producer != nullptr ? &producer->op() : nullptr);
  return op_.y;
}

const Tensor& Linear::forward(ops::Context& c, const ops::GatedInput& x, bool training, const ops::LinearOutput& next) {
  ops::linear_forward(c, op(), x, training, next);
  return op_.y;
}

const Tensor& Linear::backward(ops::Context& c, const Tensor& dy, const ops::DropoutSpec& dropout, Tensor* dx_bf16) {
  const ops::LinearGradient g{.linear = &op_, .dy = &dy, .dropout = dropout, .dx_bf16 = dx_bf16};
  ops::linear_backward(c, {&g, 1});
  return dx_bf16 != nullptr ? *dx_bf16 : op_.dx;
}

}  // namespace fp8kit::nn
