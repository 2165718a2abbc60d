// Tensor-level causal attention: argument checks, then the CPU cores (ops/cpu/attention.cpp, which save
// the probabilities) or the CUDA kernels (ops/cuda/attention.h, which save row statistics).
#include "ops/attention.h"

#include "base/error.h"
#include "ops/tensor_checks.h"

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/attention.h"
#include "ops/cuda/context.h"
#endif

namespace fp8kit::ops {

namespace {

// q, k, v as `shape` says, on the context's device.
void check_qkv(const Context& c, const Tensor& q, const Tensor& k, const Tensor& v, const AttentionShape& s,
               std::string_view op) {
  const std::initializer_list<int64_t> rows = {s.batch, s.seq, s.heads * s.head_dim};
  check_tensor(c, q, rows, DType::F32, op, "q");
  check_tensor(c, k, rows, DType::F32, op, "k");
  check_tensor(c, v, rows, DType::F32, op, "v");
}

// The saved tensor's last dimension on the context's device: seq (probabilities) on the CPU, 2 (row
// max and sum) on the GPU.
int64_t saved_columns(const Context& c, int64_t seq) { return c.is_cuda() ? 2 : seq; }

}  // namespace

void causal_attention_forward(Context& c, const Tensor& q, const Tensor& k, const Tensor& v,
                              const AttentionShape& shape, const DropoutSpec& dropout, bool bf16, Tensor& saved,
                              Tensor& out) {
  constexpr std::string_view op = "causal_attention_forward";
  FP8KIT_CHECK(shape.batch >= 0 && shape.seq > 0 && shape.heads > 0 && shape.head_dim > 0,
               "{}: shape must be positive: batch {} seq {} heads {} head_dim {}", op, shape.batch, shape.seq,
               shape.heads, shape.head_dim);
  check_qkv(c, q, k, v, shape, op);
  const int64_t B = shape.batch, T = shape.seq, H = shape.heads;
  prepare_output(c, saved, {B, H, T, saved_columns(c, T)}, DType::F32, op, "saved");
  prepare_output(c, out, {B, T, H * shape.head_dim}, DType::F32, op, "out");
  if (!c.is_cuda()) {
    const std::optional<DropoutMask> mask = dropout_mask(c, dropout);
    causal_attention_forward(shape, q.data<float>(), k.data<float>(), v.data<float>(), mask ? &*mask : nullptr,
                             dropout.rate, bf16, saved.data<float>(), out.data<float>());
    return;
  }
#if FP8KIT_HAVE_CUDA
  FP8KIT_CHECK(shape.head_dim == 16 || shape.head_dim == 32 || shape.head_dim == 64,
               "{}: the GPU kernels take head_dim 16, 32 or 64, got {}: choose heads so that hidden / heads is one", op,
               shape.head_dim);
  cuda::causal_attention_forward(shape, q.device_data<float>(), k.device_data<float>(), v.device_data<float>(),
                                 dropout_site(c, dropout), bf16, saved.device_data<float>(), out.device_data<float>(),
                                 stream(c));
#endif
}

void causal_attention_backward(Context& c, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& saved,
                               const DropoutSpec& dropout, bool bf16, const Tensor& dout, Tensor& dq, Tensor& dk,
                               Tensor& dv) {
  constexpr std::string_view op = "causal_attention_backward";
  FP8KIT_CHECK(q.rank() == 3 && saved.rank() == 4 && saved.dim(1) > 0 && q.dim(2) % saved.dim(1) == 0,
               "{}: q must be [batch, seq, heads * head_dim] and saved [batch, heads, seq, {}] (the forward's), got "
               "ranks {} and {}",
               op, c.is_cuda() ? "2" : "seq", q.rank(), saved.rank());
  const AttentionShape shape{q.dim(0), q.dim(1), saved.dim(1), q.dim(2) / saved.dim(1)};
  const int64_t B = shape.batch, T = shape.seq, H = shape.heads, C = q.dim(2);
  check_qkv(c, q, k, v, shape, op);
  check_tensor(c, saved, {B, H, T, saved_columns(c, T)}, DType::F32, op,
               c.is_cuda() ? "saved (the forward's row statistics on this GPU)"
                           : "saved (the forward's probabilities on the CPU)");
  check_tensor(c, dout, {B, T, C}, DType::F32, op, "dout");
  prepare_output(c, dq, {B, T, C}, DType::F32, op, "dq");
  prepare_output(c, dk, {B, T, C}, DType::F32, op, "dk");
  prepare_output(c, dv, {B, T, C}, DType::F32, op, "dv");
  if (!c.is_cuda()) {
    const std::optional<DropoutMask> mask = dropout_mask(c, dropout);
    causal_attention_backward(shape, q.data<float>(), k.data<float>(), v.data<float>(), saved.data<float>(),
                              mask ? &*mask : nullptr, dropout.rate, bf16, dout.data<float>(), dq.data<float>(),
                              dk.data<float>(), dv.data<float>());
    return;
  }
#if FP8KIT_HAVE_CUDA
  const size_t bytes = cuda::causal_attention_backward_workspace(shape);
  cuda::causal_attention_backward(shape, q.device_data<float>(), k.device_data<float>(), v.device_data<float>(),
                                  saved.device_data<float>(), dropout_site(c, dropout), bf16, dout.device_data<float>(),
                                  dq.device_data<float>(), dk.device_data<float>(), dv.device_data<float>(),
                                  c.scratch(bytes), bytes, stream(c));
#endif
}

}  // namespace fp8kit::ops
