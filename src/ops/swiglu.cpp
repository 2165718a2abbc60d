// SwiGLU on Tensors: argument checks, then the CPU core (ops/cpu/swiglu.h) or the GPU kernels
// (ops/cuda/swiglu.h) on the context's current lane.
#include "ops/swiglu.h"

#include "base/error.h"
#include "ops/cpu/swiglu.h"
#include "ops/tensor_checks.h"

#include <fmt/ranges.h>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/context.h"
#include "ops/cuda/activation_out.h"
#include "ops/cuda/swiglu.h"
#endif

namespace fp8kit::ops {

namespace {

// gate [rows, ffn] f32 and `other` of its shape.
void check_pair(const Context& c, const Tensor& gate, const Tensor& other, std::string_view op, std::string_view what) {
  FP8KIT_CHECK(gate.rank() == 2, "{}: gate must be [rows, ffn], got [{}]", op, fmt::join(gate.shape(), ", "));
  check_tensor(c, gate, gate.shape(), DType::F32, op, "gate");
  check_tensor(c, other, gate.shape(), DType::F32, op, what);
}

}  // namespace

void swiglu_forward(Context& c, const Tensor& gate, const Tensor& up, bool bf16, Tensor& out) {
  constexpr std::string_view op = "swiglu_forward";
  check_pair(c, gate, up, op, "up (gate's shape)");
  prepare_output(c, out, gate.shape(), DType::F32, op, "out");
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    cuda::swiglu_forward(gate.numel(), gate.device_data<float>(), up.device_data<float>(), bf16,
                         out.device_data<float>(), stream(c));
#endif
    return;
  }
  cpu::swiglu_forward(gate.numel(), gate.data<float>(), up.data<float>(), bf16, out.data<float>());
}

void swiglu_backward(Context& c, const Tensor& gate, const Tensor& up, const Tensor& dout, Tensor& dgate, Tensor& dup) {
  constexpr std::string_view op = "swiglu_backward";
  check_pair(c, gate, up, op, "up (gate's shape)");
  check_pair(c, gate, dout, op, "dout (gate's shape)");
  prepare_output(c, dgate, gate.shape(), DType::F32, op, "dgate");
  prepare_output(c, dup, gate.shape(), DType::F32, op, "dup");
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    cuda::swiglu_backward(gate.numel(), gate.device_data<float>(), up.device_data<float>(), dout.device_data<float>(),
                          dgate.device_data<float>(), dup.device_data<float>(), stream(c));
#endif
    return;
  }
  cpu::swiglu_backward(gate.numel(), gate.data<float>(), up.data<float>(), dout.data<float>(), dgate.data<float>(),
                       dup.data<float>());
}

void swiglu(Context& c, const Tensor& gate_up, const ActivationOut& out) {
  constexpr std::string_view op = "swiglu";
  FP8KIT_CHECK(gate_up.rank() == 2 && gate_up.dim(1) >= 2 && gate_up.dim(1) % 2 == 0,
               "{}: gate_up must be [rows, 2 ffn] bf16 (gate, then up), got [{}]", op,
               fmt::join(gate_up.shape(), ", "));
  const int64_t rows = gate_up.dim(0), ffn = gate_up.dim(1) / 2;
  check_tensor(c, gate_up, gate_up.shape(), DType::Bf16, op, "gate_up");
  FP8KIT_CHECK(out.bf16 == nullptr || !out.bf16->shares_storage(gate_up),
               "{}: out.bf16 must be a tensor of its own (not gate_up)", op);
  detail::prepare_activation_out(c, out, rows, ffn, op);
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    cuda::swiglu(rows, ffn, gate_up.device_data<uint16_t>(), detail::activation_out_args(c, out), stream(c));
#endif
    return;
  }
  Tensor staging;
  Tensor& y = detail::activation_bf16(out, rows, ffn, staging);
  cpu::swiglu_bf16(rows, ffn, gate_up.data<uint16_t>(), y.data<uint16_t>());
  detail::finish_activation_out(c, out, staging);
}

}  // namespace fp8kit::ops
