// Grouped-query self-attention on the Linear, RoPE and SDPA ops.
#include "nn/grouped_query_attention.h"

#include "ops/elementwise.h"
#include "ops/rope.h"

#include <utility>

namespace fp8kit::nn {

namespace {

// A projection as HF names it, with PyTorch's bias when asked for.
Linear projection(ParameterSet& parameters, const std::string& name, int64_t in, int64_t out, bool bias) {
  if (bias) return Linear(parameters, name, in, out, Activation::None);
  return Linear(parameters, name, in, out);
}

}  // namespace

GroupedQueryAttention::GroupedQueryAttention(ParameterSet& parameters, const std::string& name, int64_t hidden,
                                             int64_t heads, int64_t kv_heads, int64_t head_dim, bool bias)
    : q_proj(projection(parameters, name + ".q_proj", hidden, heads * head_dim, bias)),
      k_proj(projection(parameters, name + ".k_proj", hidden, kv_heads * head_dim, bias)),
      v_proj(projection(parameters, name + ".v_proj", hidden, kv_heads * head_dim, bias)),
      o_proj(projection(parameters, name + ".o_proj", heads * head_dim, hidden, bias)) {
  shape_.heads = heads;
  shape_.kv_heads = kv_heads;
  shape_.head_dim = head_dim;
}

void GroupedQueryAttention::set_precision(Precision precision, ops::ScalingTable* scaling) {
  for (Linear* l : linears()) l->set_precision(precision, scaling);
  share_inputs();
}

void GroupedQueryAttention::share_inputs() {
  // key and value share query's GEMM operands of x (bf16 on the GPU; delayed FP8 and block-scaled on
  // both devices: ops::shares_input_operands).
  for (Linear* l : {&k_proj, &v_proj})
    l->op().input_of = ops::shares_input_operands(q_proj.op(), l->op()) ? &q_proj.op() : nullptr;
}

const Tensor& GroupedQueryAttention::forward(ops::Context& c, const Tensor& x, int64_t batch, int64_t seq,
                                             const Tensor* rope, bool training, bool bf16,
                                             const ops::LinearOutput& next) {
  shape_.batch = batch;
  shape_.seq = seq;
  rope_ = rope;
  bf16_ = bf16;
  ops::linear_prepare_input(c, q_proj.op(), x, training);
  c.fork(ops::Lane::A);
  c.fork(ops::Lane::B);
  q_proj.forward(c, x, training);  // without bias y is the GEMM's output, no pass after it
  {
    const ops::Context::OnLane lane(c, ops::Lane::A);
    k_proj.forward(c, x, training);
  }
  {
    const ops::Context::OnLane lane(c, ops::Lane::B);
    v_proj.forward(c, x, training);
  }
  c.join(ops::Lane::A);
  c.join(ops::Lane::B);
  const int64_t q_channels = shape_.heads * shape_.head_dim, kv_channels = shape_.kv_heads * shape_.head_dim;
  Tensor q = q_proj.op().y.view(0, {batch, seq, q_channels}), k = k_proj.op().y.view(0, {batch, seq, kv_channels});
  if (rope != nullptr) {
    ops::rope_forward(c, *rope, q, shape_.heads, 0, bf16, q_);
    ops::rope_forward(c, *rope, k, shape_.kv_heads, 0, bf16, k_);
  } else {
    q_ = std::move(q);
    k_ = std::move(k);
  }
  v_ = v_proj.op().y.view(0, {batch, seq, kv_channels});
  ops::sdpa_forward(c, shape_, q_, k_, v_, bf16, out_, lse_);
  return o_proj.forward(c, out_, training, next);
}

std::vector<Tensor*> GroupedQueryAttention::backward_buffers() {
  return {&dq_, &dk_, &dv_, &dx_, &q_proj.dx_buffer(), &k_proj.dx_buffer(), &v_proj.dx_buffer(), &o_proj.dx_buffer()};
}

std::vector<Tensor*> GroupedQueryAttention::step_buffers() {
  std::vector<Tensor*> all = {&q_, &k_, &out_, &lse_};  // v_ is a view of v_proj's output
  for (Linear* l : linears())
    for (Tensor* t : l->step_buffers()) all.push_back(t);
  return all;
}

const Tensor& GroupedQueryAttention::backward(ops::Context& c, const Tensor& dy) {
  const int64_t rows = shape_.batch * shape_.seq;
  const int64_t q_channels = shape_.heads * shape_.head_dim, kv_channels = shape_.kv_heads * shape_.head_dim;
  const Tensor dout = o_proj.backward(c, dy).view(0, {shape_.batch, shape_.seq, q_channels});
  ops::sdpa_backward(c, shape_, q_, k_, v_, out_, lse_, dout, dq_, dk_, dv_);
  if (rope_ != nullptr) {
    ops::rope_backward(c, *rope_, dq_, shape_.heads, 0, dq_);
    ops::rope_backward(c, *rope_, dk_, shape_.kv_heads, 0, dk_);
  }
  const Tensor dq = dq_.view(0, {rows, q_channels}), dk = dk_.view(0, {rows, kv_channels}),
               dv = dv_.view(0, {rows, kv_channels});
  const ops::LinearGradient query{&q_proj.op(), &dq, {}, ops::Lane::Main};
  ops::linear_backward(c, {&query, 1});
  const ops::LinearGradient key_value[] = {{&k_proj.op(), &dk, {}, ops::Lane::A},
                                           {&v_proj.op(), &dv, {}, ops::Lane::B}};
  ops::linear_backward(c, key_value);
  const Tensor* rest[] = {&k_proj.op().dx, &v_proj.op().dx};
  ops::sum_dropout_backward(c, q_proj.op().dx, rest, false, {}, dx_);
  return dx_;
}

}  // namespace fp8kit::nn
