// RMSNorm on Tensors: argument checks, then the CPU core (ops/cpu/rms_norm.h) or the GPU kernels
// (ops/cuda/rms_norm.h) on the context's current lane.
#include "ops/rms_norm.h"

#include "base/error.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/rms_norm.h"
#include "ops/tensor_checks.h"

#include <fmt/ranges.h>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/context.h"
#include "ops/cuda/activation_out.h"
#include "ops/cuda/rms_norm.h"
#endif

namespace fp8kit::ops {

namespace {

// x as [rows, dim] and weight [dim].
Rows check_x(const Context& c, const Tensor& x, const Tensor& weight, std::string_view op) {
  const Rows s = check_rows(c, x, op);
  check_tensor(c, weight, {s.dim}, DType::F32, op, "weight");
  return s;
}

}  // namespace

void rms_norm_forward(Context& c, const Tensor& x, const Tensor& weight, float eps, bool bf16_out, Tensor& out,
                      Tensor& rstd) {
  constexpr std::string_view op = "rms_norm_forward";
  const Rows s = check_x(c, x, weight, op);
  prepare_output(c, out, {s.rows, s.dim}, DType::F32, op, "out");
  prepare_output(c, rstd, {s.rows}, DType::F32, op, "rstd");
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    cuda::rms_norm_forward(s.rows, s.dim, eps, x.device_data<float>(), weight.device_data<float>(), bf16_out,
                           out.device_data<float>(), rstd.device_data<float>(), stream(c));
#endif
    return;
  }
  cpu::rms_norm_forward(s.rows, s.dim, eps, x.data<float>(), weight.data<float>(), bf16_out, out.data<float>(),
                        rstd.data<float>());
}

void rms_norm_backward(Context& c, const Tensor& x, const Tensor& weight, const Tensor& rstd, const Tensor& dout,
                       Tensor& dx, Tensor& dweight, const Tensor* residual) {
  constexpr std::string_view op = "rms_norm_backward";
  const Rows s = check_x(c, x, weight, op);
  check_tensor(c, rstd, {s.rows}, DType::F32, op, "rstd (rms_norm_forward's)");
  check_tensor(c, dout, {s.rows, s.dim}, DType::F32, op, "dout");
  if (residual != nullptr) check_tensor(c, *residual, {s.rows, s.dim}, DType::F32, op, "residual (dout's shape)");
  FP8KIT_CHECK(!dx.shares_storage(x) && !dx.shares_storage(dout) && (residual == nullptr || !dx.shares_storage(*residual)),
               "{}: dx must be a tensor of its own (not x, dout or residual)", op);
  prepare_output(c, dx, {s.rows, s.dim}, DType::F32, op, "dx");
  prepare_output(c, dweight, {s.dim}, DType::F32, op, "dweight");
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    const int64_t floats = cuda::rms_norm_backward_workspace(s.rows, s.dim);
    auto* workspace = static_cast<float*>(c.scratch(static_cast<size_t>(floats) * sizeof(float)));
    cuda::rms_norm_backward(s.rows, s.dim, x.device_data<float>(), weight.device_data<float>(),
                            rstd.device_data<float>(), dout.device_data<float>(),
                            residual != nullptr ? residual->device_data<float>() : nullptr, dx.device_data<float>(),
                            dweight.device_data<float>(), workspace, stream(c));
#endif
    return;
  }
  cpu::rms_norm_backward_dx(s.rows, s.dim, x.data<float>(), weight.data<float>(), rstd.data<float>(),
                            dout.data<float>(), dx.data<float>());
  if (residual != nullptr) cpu::add(residual->span<float>(), dx.span<float>(), false, dx.span<float>());
  cpu::rms_norm_backward_weight(s.rows, s.dim, x.data<float>(), rstd.data<float>(), dout.data<float>(),
                                dweight.data<float>());
}

void add_rms_norm(Context& c, Tensor& residual, const Tensor* delta, const Tensor& weight, float eps,
                  const ActivationOut& out) {
  constexpr std::string_view op = "add_rms_norm";
  FP8KIT_CHECK(residual.rank() == 2 && residual.dim(1) >= 1,
               "{}: residual must be [rows, dim] bf16 with dim >= 1, got [{}]", op, fmt::join(residual.shape(), ", "));
  const int64_t rows = residual.dim(0), dim = residual.dim(1);
  check_tensor(c, residual, {rows, dim}, DType::Bf16, op, "residual");
  if (delta != nullptr) check_tensor(c, *delta, {rows, dim}, DType::Bf16, op, "delta (residual's shape)");
  check_tensor(c, weight, {dim}, DType::F32, op, "weight");
  FP8KIT_CHECK(out.bf16 == nullptr || (!out.bf16->shares_storage(residual) &&
                                       (delta == nullptr || !out.bf16->shares_storage(*delta))),
               "{}: out.bf16 must be a tensor of its own (not residual or delta)", op);
  detail::prepare_activation_out(c, out, rows, dim, op);
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    cuda::add_rms_norm(rows, dim, eps, residual.device_data<uint16_t>(),
                       delta != nullptr ? delta->device_data<uint16_t>() : nullptr, weight.device_data<float>(),
                       detail::activation_out_args(c, out), stream(c));
#endif
    return;
  }
  Tensor staging;
  Tensor& y = detail::activation_bf16(out, rows, dim, staging);
  cpu::add_rms_norm(rows, dim, eps, residual.data<uint16_t>(), delta != nullptr ? delta->data<uint16_t>() : nullptr,
                    weight.data<float>(), y.data<uint16_t>());
  detail::finish_activation_out(c, out, staging);
}

}  // namespace fp8kit::ops
