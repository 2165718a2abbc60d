// Tensor-level grouped-query SDPA: argument checks, then the CPU core (ops/cpu/sdpa.cpp) or cuDNN's
// fused attention (ops/cuda/sdpa.cpp).
#include "ops/sdpa.h"

#include "base/error.h"
#include "ops/cpu/sdpa.h"
#include "ops/tensor_checks.h"

#include <cmath>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/sdpa.h"
#endif

namespace fp8kit::ops {

namespace {

constexpr int64_t kMaxHeadDim = 256;

// The shape checked, with its scale resolved.
SdpaShape checked(const SdpaShape& s, std::string_view op) {
  FP8KIT_CHECK(s.batch > 0 && s.seq > 0 && s.heads > 0 && s.kv_heads > 0 && s.head_dim > 0,
               "{}: shape must be positive: batch {} seq {} heads {} kv_heads {} head_dim {}", op, s.batch, s.seq,
               s.heads, s.kv_heads, s.head_dim);
  FP8KIT_CHECK(s.heads % s.kv_heads == 0, "{}: kv_heads {} must divide heads {} (grouped-query attention)", op,
               s.kv_heads, s.heads);
  FP8KIT_CHECK(s.head_dim <= kMaxHeadDim, "{}: head_dim {} is above the supported {}", op, s.head_dim, kMaxHeadDim);
  FP8KIT_CHECK(std::isfinite(s.scale) && s.scale >= 0.0f, "{}: scale must be finite and >= 0 (0: 1/sqrt(head_dim)), got {}",
               op, s.scale);
  SdpaShape resolved = s;
  if (resolved.scale == 0.0f) resolved.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(s.head_dim)));
  return resolved;
}

// q, k, v as the shape says, on the context's device, of one dtype (F32 or Bf16), which is returned.
DType check_qkv(const Context& c, const SdpaShape& s, const Tensor& q, const Tensor& k, const Tensor& v,
                std::string_view op) {
  const DType dtype = q.dtype();
  FP8KIT_CHECK(dtype == DType::F32 || dtype == DType::Bf16, "{}: q must be f32 or bf16, got {}", op, name(dtype));
  check_tensor(c, q, {s.batch, s.seq, s.heads * s.head_dim}, dtype, op, "q");
  check_tensor(c, k, {s.batch, s.seq, s.kv_heads * s.head_dim}, dtype, op, "k (q's dtype)");
  check_tensor(c, v, {s.batch, s.seq, s.kv_heads * s.head_dim}, dtype, op, "v (q's dtype)");
  return dtype;
}

}  // namespace

DType sdpa_dtype(const Context& c, bool bf16) { return bf16 && c.is_cuda() ? DType::Bf16 : DType::F32; }

void sdpa_forward(Context& c, const SdpaShape& shape, const Tensor& q, const Tensor& k, const Tensor& v,
                  bool bf16_out, Tensor& out, Tensor& lse, const Tensor* lengths) {
  constexpr std::string_view op = "sdpa_forward";
  const SdpaShape s = checked(shape, op);
  const DType dtype = check_qkv(c, s, q, k, v, op);
  if (lengths != nullptr) check_tensor(c, *lengths, {s.batch}, DType::I32, op, "lengths");
  prepare_output(c, out, {s.batch, s.seq, s.heads * s.head_dim}, dtype, op, "out (q's dtype)");
  prepare_output(c, lse, {s.batch, s.heads, s.seq}, DType::F32, op, "lse");
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    cuda_sdpa_forward(c, s, q, k, v, out, lse, lengths);
#endif
    return;
  }
  const int32_t* n = lengths != nullptr ? lengths->data<int32_t>() : nullptr;
  for (int64_t b = 0; n != nullptr && b < s.batch; ++b)
    FP8KIT_CHECK(n[b] >= 1 && n[b] <= s.seq, "{}: lengths[{}] = {} is outside [1, seq = {}]", op, b, n[b], s.seq);
  if (dtype == DType::Bf16) {
    cpu::sdpa_forward(s, q.data<uint16_t>(), k.data<uint16_t>(), v.data<uint16_t>(), true, out.data<uint16_t>(),
                      lse.data<float>(), n);
  } else {
    cpu::sdpa_forward(s, q.data<float>(), k.data<float>(), v.data<float>(), bf16_out, out.data<float>(),
                      lse.data<float>(), n);
  }
}

void sdpa_backward(Context& c, const SdpaShape& shape, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& out, const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv) {
  constexpr std::string_view op = "sdpa_backward";
  const SdpaShape s = checked(shape, op);
  const DType dtype = check_qkv(c, s, q, k, v, op);
  const std::initializer_list<int64_t> q_shape = {s.batch, s.seq, s.heads * s.head_dim};
  const std::initializer_list<int64_t> kv_shape = {s.batch, s.seq, s.kv_heads * s.head_dim};
  check_tensor(c, out, q_shape, dtype, op, "out (the forward's)");
  check_tensor(c, lse, {s.batch, s.heads, s.seq}, DType::F32, op, "lse (the forward's)");
  check_tensor(c, dout, q_shape, dtype, op, "dout (q's dtype)");
  prepare_output(c, dq, q_shape, dtype, op, "dq (q's dtype)");
  prepare_output(c, dk, kv_shape, dtype, op, "dk (q's dtype)");
  prepare_output(c, dv, kv_shape, dtype, op, "dv (q's dtype)");
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    cuda_sdpa_backward(c, s, q, k, v, out, lse, dout, dq, dk, dv);
#endif
    return;
  }
  if (dtype == DType::Bf16) {
    cpu::sdpa_backward(s, q.data<uint16_t>(), k.data<uint16_t>(), v.data<uint16_t>(), out.data<uint16_t>(),
                       lse.data<float>(), dout.data<uint16_t>(), dq.data<uint16_t>(), dk.data<uint16_t>(),
                       dv.data<uint16_t>());
  } else {
    cpu::sdpa_backward(s, q.data<float>(), k.data<float>(), v.data<float>(), out.data<float>(), lse.data<float>(),
                       dout.data<float>(), dq.data<float>(), dk.data<float>(), dv.data<float>());
  }
}

}  // namespace fp8kit::ops
