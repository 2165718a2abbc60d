// Causal self-attention layer: projections around the causal attention op.
#include "nn/attention.h"

#include "ops/attention.h"

namespace fp8kit::nn {

CausalSelfAttention::CausalSelfAttention(ParameterSet& parameters, const std::string& path, int64_t hidden,
                                         int64_t heads, int64_t head_dim)
    : query(parameters, path + "/query", hidden, heads * head_dim, {hidden, heads, head_dim}, {heads, head_dim},
            Activation::None),
      key(parameters, path + "/key", hidden, heads * head_dim, {hidden, heads, head_dim}, {heads, head_dim},
          Activation::None),
      value(parameters, path + "/value", hidden, heads * head_dim, {hidden, heads, head_dim}, {heads, head_dim},
            Activation::None),
      output(parameters, path + "/attention_output", heads * head_dim, hidden, {heads, head_dim, hidden}, {hidden},
             Activation::None),
      heads_(heads),
      head_dim_(head_dim) {}

void CausalSelfAttention::set_precision(Precision precision, ops::ScalingTable* scaling) {
  for (Linear* l : linears()) l->set_precision(precision, scaling);
  // key and value share query's GEMM operands of x (bf16 on the GPU; delayed FP8 and block-scaled on
  // both devices: ops::shares_input_operands).
  for (Linear* l : {&key, &value})
    l->op().input_of = ops::shares_input_operands(query.op(), l->op()) ? &query.op() : nullptr;
}

const Tensor& CausalSelfAttention::forward(ops::Context& c, const Tensor& x, int64_t batch, int64_t seq,
                                           bool training, bool bf16, const ops::DropoutSpec& probabilities,
                                           const ops::LinearOutput& next) {
  batch_ = batch;
  seq_ = seq;
  bf16_ = bf16;
  probabilities_ = probabilities;
  // The three projections side by side (query on Main, key and value on lanes A and B), from x's
  // GEMM operand made once before them where they share it.
  ops::linear_prepare_input(c, query.op(), x, training);
  c.fork(ops::Lane::A);
  c.fork(ops::Lane::B);
  query.forward(c, x, training, {.deferred = true});
  {
    const ops::Context::OnLane lane(c, ops::Lane::A);
    key.forward(c, x, training, {.deferred = true});
  }
  {
    const ops::Context::OnLane lane(c, ops::Lane::B);
    value.forward(c, x, training, {.deferred = true});
  }
  c.join(ops::Lane::A);
  c.join(ops::Lane::B);
  ops::LinearOp* projections[] = {&query.op(), &key.op(), &value.op()};
  ops::linear_finish(c, projections);  // their biases in one pass
  // The projections' [batch * seq, channels] as the core's [batch, seq, channels].
  const int64_t channels = heads_ * head_dim_;
  q_ = query.op().y.view(0, {batch, seq, channels});
  k_ = key.op().y.view(0, {batch, seq, channels});
  v_ = value.op().y.view(0, {batch, seq, channels});
  ops::causal_attention_forward(c, q_, k_, v_, {batch, seq, heads_, head_dim_}, probabilities, bf16, saved_, context_);
  return output.forward(c, context_, training, next);
}

void CausalSelfAttention::backward(ops::Context& c, const Tensor& dy, const ops::DropoutSpec& dropout) {
  const int64_t rows = batch_ * seq_, channels = heads_ * head_dim_;
  const Tensor dcontext = output.backward(c, dy, dropout).view(0, {batch_, seq_, channels});
  ops::causal_attention_backward(c, q_, k_, v_, saved_, probabilities_, bf16_, dcontext, dq_, dk_, dv_);
  const Tensor dq = dq_.view(0, {rows, channels}), dk = dk_.view(0, {rows, channels}), dv = dv_.view(0, {rows, channels});
  const ops::LinearGradient group[] = {{&query.op(), &dq, {}, ops::Lane::Main},
                                       {&key.op(), &dk, {}, ops::Lane::A},
                                       {&value.op(), &dv, {}, ops::Lane::B}};
  ops::linear_backward(c, group);
}

std::array<const Tensor*, 3> CausalSelfAttention::input_gradients() {
  return {&query.op().dx, &key.op().dx, &value.op().dx};
}

}  // namespace fp8kit::nn
