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

// t, as an op's output of `dtype`: emptied first when it holds another dtype (the precision changed
// since it was made), so that the op makes it anew.
Tensor& output_of(Tensor& t, DType dtype) {
  if (t.dtype() != dtype) t = Tensor();
  return t;
}

// SDPA's operand from a projection's output y [batch, seq, channels] f32: y rotated when a RoPE table
// is given, else y itself, as `dtype` (ops::sdpa_dtype); a view of y when that leaves it as it is.
void sdpa_operand(ops::Context& c, const Tensor* rope, Tensor y, int64_t heads, bool bf16, DType dtype,
                  Tensor& operand) {
  if (rope != nullptr) {
    ops::rope_forward(c, *rope, y, heads, 0, bf16, output_of(operand, dtype), dtype);
  } else if (dtype == y.dtype()) {
    operand = std::move(y);
  } else {
    ops::convert(c, y, dtype, output_of(operand, dtype));
  }
}

// A projection's output gradient from SDPA's gradient d of its operand: through RoPE's backward
// into f32 when a table is given (reading bf16 as cuDNN wrote it; f32 gradients in place), else d
// itself, which the Linear reads as it is (ops::LinearGradient).
const Tensor& projection_gradient(ops::Context& c, const Tensor* rope, Tensor& d, int64_t heads, Tensor& f32) {
  if (rope == nullptr) return d;
  Tensor& out = d.dtype() == DType::F32 ? d : f32;
  ops::rope_backward(c, *rope, d, heads, 0, out);
  return out;
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
  // Without bias y is the GEMM's output, no pass after it; with one, the three biases are applied
  // together as the outputs become SDPA's operands.
  ops::LinearOp* projections[] = {&q_proj.op(), &k_proj.op(), &v_proj.op()};
  const bool biased = q_proj.op().has_epilogue();
  const ops::LinearOutput next_qkv{.deferred = biased};
  c.fork(ops::Lane::A);
  c.fork(ops::Lane::B);
  q_proj.forward(c, x, training, next_qkv);
  {
    const ops::Context::OnLane lane(c, ops::Lane::A);
    k_proj.forward(c, x, training, next_qkv);
  }
  {
    const ops::Context::OnLane lane(c, ops::Lane::B);
    v_proj.forward(c, x, training, next_qkv);
  }
  c.join(ops::Lane::A);
  c.join(ops::Lane::B);
  const int64_t q_channels = shape_.heads * shape_.head_dim, kv_channels = shape_.kv_heads * shape_.head_dim;
  // bf16 operands on the GPU: RoPE writes q and k as bf16, v is cast once for the forward and the
  // backward (without RoPE, biased q, k and v in one pass from the GEMMs' outputs), and o_proj's cast
  // reads cuDNN's bf16 out as it is (no casts inside sdpa).
  const DType dtype = ops::sdpa_dtype(c, bf16);
  if (biased && rope == nullptr && dtype != DType::F32) {
    Tensor* operands[] = {&output_of(q_, dtype), &output_of(k_, dtype), &output_of(v_, dtype)};
    ops::linear_finish(c, projections, dtype, operands);
    q_.resize({batch, seq, q_channels});
    k_.resize({batch, seq, kv_channels});
    v_.resize({batch, seq, kv_channels});
  } else {
    if (biased) ops::linear_finish(c, projections);
    sdpa_operand(c, rope, q_proj.op().y.view(0, {batch, seq, q_channels}), shape_.heads, bf16, dtype, q_);
    sdpa_operand(c, rope, k_proj.op().y.view(0, {batch, seq, kv_channels}), shape_.kv_heads, bf16, dtype, k_);
    sdpa_operand(c, nullptr, v_proj.op().y.view(0, {batch, seq, kv_channels}), shape_.kv_heads, bf16, dtype, v_);
  }
  ops::sdpa_forward(c, shape_, q_, k_, v_, bf16, output_of(out_, dtype), lse_);
  return o_proj.forward(c, out_, training, next);
}

std::vector<Tensor*> GroupedQueryAttention::backward_buffers() {
  return {&dout_, &dq_, &dk_, &dv_, &dq_f32_, &dk_f32_, &dx_,
          &q_proj.dx_buffer(), &k_proj.dx_buffer(), &v_proj.dx_buffer(), &o_proj.dx_buffer()};
}

std::vector<Tensor*> GroupedQueryAttention::step_buffers() {
  std::vector<Tensor*> all = {&q_, &k_, &v_, &out_, &lse_};
  for (Linear* l : linears())
    for (Tensor* t : l->step_buffers()) all.push_back(t);
  return all;
}

const Tensor& GroupedQueryAttention::backward(ops::Context& c, const Tensor& dy) {
  const int64_t rows = shape_.batch * shape_.seq;
  const int64_t q_channels = shape_.heads * shape_.head_dim, kv_channels = shape_.kv_heads * shape_.head_dim;
  const DType dtype = q_.dtype();
  // SDPA's dout as o_proj's dgrad writes it: bf16 straight from the GEMM where SDPA reads bf16.
  const Tensor dout = o_proj.backward(c, dy, {}, dtype == DType::F32 ? nullptr : &output_of(dout_, dtype))
                          .view(0, {shape_.batch, shape_.seq, q_channels});
  ops::sdpa_backward(c, shape_, q_, k_, v_, out_, lse_, dout, output_of(dq_, dtype), output_of(dk_, dtype),
                     output_of(dv_, dtype));
  const Tensor dq = projection_gradient(c, rope_, dq_, shape_.heads, dq_f32_).view(0, {rows, q_channels}),
               dk = projection_gradient(c, rope_, dk_, shape_.kv_heads, dk_f32_).view(0, {rows, kv_channels}),
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
