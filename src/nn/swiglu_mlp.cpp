// The SwiGLU MLP on the Linear and SwiGLU ops.
#include "nn/swiglu_mlp.h"

#include "ops/elementwise.h"

namespace fp8kit::nn {

SwiGluMlp::SwiGluMlp(ParameterSet& parameters, const std::string& name, int64_t hidden, int64_t ffn)
    : gate_proj(parameters, name + ".gate_proj", hidden, ffn),
      up_proj(parameters, name + ".up_proj", hidden, ffn),
      down_proj(parameters, name + ".down_proj", ffn, hidden) {}

void SwiGluMlp::set_precision(Precision precision, ops::ScalingTable* scaling) {
  for (Linear* l : linears()) l->set_precision(precision, scaling);
  share_inputs();
}

void SwiGluMlp::share_inputs() {
  up_proj.op().input_of = ops::shares_input_operands(gate_proj.op(), up_proj.op()) ? &gate_proj.op() : nullptr;
}

const Tensor& SwiGluMlp::forward(ops::Context& c, const Tensor& x, bool training, bool bf16,
                                 const ops::LinearOutput& next) {
  ops::linear_prepare_input(c, gate_proj.op(), x, training);
  c.fork(ops::Lane::A);
  gate_proj.forward(c, x, training);  // bias-free: y is the GEMM's output
  {
    const ops::Context::OnLane lane(c, ops::Lane::A);
    up_proj.forward(c, x, training);
  }
  c.join(ops::Lane::A);
  // silu(gate) up inside down's cast of its input where the GPU can (act_ is then not written).
  return down_proj.forward(c, ops::GatedInput{&gate_proj.op().y, &up_proj.op().y, bf16, &act_}, training, next);
}

std::vector<Tensor*> SwiGluMlp::backward_buffers() {
  return {&dgate_, &dup_, &dx_, &gate_proj.dx_buffer(), &up_proj.dx_buffer(), &down_proj.dx_buffer()};
}

std::vector<Tensor*> SwiGluMlp::step_buffers() {
  std::vector<Tensor*> all = {&act_};
  for (Linear* l : linears())
    for (Tensor* t : l->step_buffers()) all.push_back(t);
  return all;
}

const Tensor& SwiGluMlp::backward(ops::Context& c, const Tensor& dy) {
  const Tensor& dact = down_proj.backward(c, dy);
  // SwiGLU's backward inside gate's and up's gradient casts where the GPU can (dgate_, dup_ unwritten).
  ops::linear_backward_gated(c, gate_proj.op(), up_proj.op(), dact, dgate_, dup_, ops::Lane::A);
  ops::add(c, gate_proj.op().dx, up_proj.op().dx, false, dx_);
  return dx_;
}

}  // namespace fp8kit::nn
