// Tensor-level grouped-query SDPA: argument checks, then the CPU core (ops/cpu/sdpa.cpp) or cuDNN's
// fused attention (ops/cuda/sdpa.cpp).
#include "ops/sdpa.h"

#include "base/error.h"
#include "numerics/cast.h"
#include "numerics/convert.h"
#include "numerics/scale.h"
#include "ops/cpu/sdpa.h"
#include "ops/tensor_checks.h"

#include <cmath>
#include <vector>

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

// An FP8 forward's operand on the CPU: the values of x's E4M3 codes at its current per-tensor scale.
struct Fp8Operand {
  std::vector<float> values;
  float scale = 1.0f, scale_inv = 1.0f;
};

Fp8Operand quantized(const Tensor& x) {
  std::vector<float> f(static_cast<size_t>(x.numel()));
  if (x.dtype() == DType::Bf16) {
    bf16_to_float(x.span<uint16_t>(), f);
  } else {
    std::copy(x.span<float>().begin(), x.span<float>().end(), f.begin());
  }
  Fp8Operand o;
  o.scale = current_scale(amax(f), Fp8Format::E4M3);
  o.scale_inv = 1.0f / o.scale;
  std::vector<uint8_t> codes(f.size());
  quantize_fp8(f, o.scale, Fp8Format::E4M3, codes);
  dequantize_fp8(codes, Fp8Format::E4M3, 1.0f, f);  // the codes' values, exactly
  o.values = std::move(f);
  return o;
}

// The CPU's FP8 forward (SdpaShape::fp8): the tiled core on the codes' values, then out through E4M3.
void cpu_sdpa_forward_fp8(const SdpaShape& s, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                          Tensor& lse, const int32_t* lengths) {
  const Fp8Operand qq = quantized(q), kq = quantized(k), vq = quantized(v);
  SdpaShape codes = s;
  codes.scale = s.scale * qq.scale_inv * kq.scale_inv;
  std::vector<float> o(static_cast<size_t>(out.numel()));
  cpu::sdpa_forward(codes, qq.values.data(), kq.values.data(), vq.values.data(), false, o.data(), lse.data<float>(),
                    lengths);
  const float scale_o = vq.scale * kSdpaFp8OutScale, descale_o = 1.0f / scale_o;
  const auto value = [&](size_t i) {
    return decode_fp8(encode_fp8(o[i] * vq.scale_inv * scale_o, Fp8Format::E4M3), Fp8Format::E4M3) * descale_o;
  };
  if (out.dtype() == DType::Bf16) {
    uint16_t* bits = out.data<uint16_t>();
    for (size_t i = 0; i < o.size(); ++i) bits[i] = float_to_bf16(value(i));
  } else {
    float* values = out.data<float>();
    for (size_t i = 0; i < o.size(); ++i) values[i] = round_bf16(value(i));
  }
}

}  // namespace

DType sdpa_dtype(const Context& c, bool bf16) { return bf16 && c.is_cuda() ? DType::Bf16 : DType::F32; }

void sdpa_forward(Context& c, const SdpaShape& shape, const Tensor& q, const Tensor& k, const Tensor& v,
                  bool bf16_out, Tensor& out, Tensor& lse, const Tensor* lengths) {
  constexpr std::string_view op = "sdpa_forward";
  const SdpaShape s = checked(shape, op);
  const DType dtype = check_qkv(c, s, q, k, v, op);
  if (lengths != nullptr) check_tensor(c, *lengths, {s.batch}, DType::I32, op, "lengths");
  // (one amax over padded sequences would tie each sequence's scales to the others')
  FP8KIT_CHECK(!s.fp8 || lengths == nullptr, "{}: FP8 attention takes no lengths: run padded batches in bf16", op);
  prepare_output(c, out, {s.batch, s.seq, s.heads * s.head_dim}, dtype, op, "out (q's dtype)");
  prepare_output(c, lse, {s.batch, s.heads, s.seq}, DType::F32, op, "lse");
  if (c.is_cuda()) {
    FP8KIT_CHECK(!s.fp8 || s.head_dim % 16 == 0, "{}: the GPU's FP8 attention takes head_dim a multiple of 16, got {}",
                 op, s.head_dim);
#if FP8KIT_HAVE_CUDA
    cuda_sdpa_forward(c, s, q, k, v, out, lse, lengths);
#endif
    return;
  }
  const int32_t* n = lengths != nullptr ? lengths->data<int32_t>() : nullptr;
  for (int64_t b = 0; n != nullptr && b < s.batch; ++b)
    FP8KIT_CHECK(n[b] >= 1 && n[b] <= s.seq, "{}: lengths[{}] = {} is outside [1, seq = {}]", op, b, n[b], s.seq);
  if (s.fp8) {
    cpu_sdpa_forward_fp8(s, q, k, v, out, lse, n);
  } else if (dtype == DType::Bf16) {
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
  SdpaShape s = checked(shape, op);
  s.fp8 = false;  // the FP8 forward's backward is bf16's
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
