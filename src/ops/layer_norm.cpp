// LayerNorm on Tensors: argument checks, then the CPU core (ops/cpu/layer_norm.h) or the GPU kernels
// (ops/cuda/layer_norm.h) on the context's current lane.
#include "ops/layer_norm.h"

#include "base/error.h"
#include "ops/cpu/elementwise.h"
#include "ops/cpu/layer_norm.h"
#include "ops/tensor_checks.h"

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/context.h"
#include "ops/cuda/layer_norm.h"
#endif

namespace fp8kit::ops {

namespace {

// The output gradient(s) and the saved statistics of a backward.
Rows check_backward(const Context& c, const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& dout,
                    const Tensor* dout2, std::string_view op) {
  const Rows s = check_rows(c, x, op);
  check_tensor(c, mean, {s.rows}, DType::F32, op, "mean (layer_norm_forward's)");
  check_tensor(c, rstd, {s.rows}, DType::F32, op, "rstd (layer_norm_forward's)");
  check_tensor(c, dout, {s.rows, s.dim}, DType::F32, op, "dout");
  if (dout2 != nullptr) check_tensor(c, *dout2, {s.rows, s.dim}, DType::F32, op, "dout2");
  return s;
}

const float* data_or_null(const Tensor* t) { return t != nullptr ? t->device_data<float>() : nullptr; }

}  // namespace

void layer_norm_forward(Context& c, const Tensor& x, const Tensor& gamma, const Tensor& beta, float eps,
                        bool bf16_out, Tensor& out, Tensor& mean, Tensor& rstd) {
  constexpr std::string_view op = "layer_norm_forward";
  const Rows s = check_rows(c, x, op);
  check_tensor(c, gamma, {s.dim}, DType::F32, op, "gamma");
  check_tensor(c, beta, {s.dim}, DType::F32, op, "beta");
  prepare_output(c, out, {s.rows, s.dim}, DType::F32, op, "out");
  prepare_output(c, mean, {s.rows}, DType::F32, op, "mean");
  prepare_output(c, rstd, {s.rows}, DType::F32, op, "rstd");
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    cuda::layer_norm_forward(s.rows, s.dim, eps, x.device_data<float>(), gamma.device_data<float>(),
                             beta.device_data<float>(), bf16_out, out.device_data<float>(), mean.device_data<float>(),
                             rstd.device_data<float>(), stream(c));
#endif
    return;
  }
  cpu::layer_norm_forward(s.rows, s.dim, eps, x.data<float>(), gamma.data<float>(), beta.data<float>(), bf16_out,
                          out.data<float>(), mean.data<float>(), rstd.data<float>());
}

void layer_norm_backward_dx(Context& c, const Tensor& x, const Tensor& gamma, const Tensor& mean, const Tensor& rstd,
                            const Tensor& dout, const Tensor* dout2, Tensor& dx, const Tensor* residual) {
  constexpr std::string_view op = "layer_norm_backward_dx";
  const Rows s = check_backward(c, x, mean, rstd, dout, dout2, op);
  check_tensor(c, gamma, {s.dim}, DType::F32, op, "gamma");
  if (residual != nullptr) check_tensor(c, *residual, {s.rows, s.dim}, DType::F32, op, "residual (dout's shape)");
  FP8KIT_CHECK(!dx.shares_storage(x) && !dx.shares_storage(dout) && (dout2 == nullptr || !dx.shares_storage(*dout2)) &&
                   (residual == nullptr || !dx.shares_storage(*residual)),
               "{}: dx must be a tensor of its own (not x, dout, dout2 or residual)", op);
  prepare_output(c, dx, {s.rows, s.dim}, DType::F32, op, "dx");
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    cuda::layer_norm_backward_dx(s.rows, s.dim, x.device_data<float>(), gamma.device_data<float>(),
                                 mean.device_data<float>(), rstd.device_data<float>(), dout.device_data<float>(),
                                 data_or_null(dout2), dx.device_data<float>(), stream(c), data_or_null(residual));
#endif
    return;
  }
  cpu::layer_norm_backward_dx(s.rows, s.dim, x.data<float>(), gamma.data<float>(), mean.data<float>(),
                              rstd.data<float>(), dout.data<float>(), data_or_null(dout2), dx.data<float>());
  if (residual != nullptr) cpu::add(residual->span<float>(), dx.span<float>(), false, dx.span<float>());
}

void layer_norm_backward_params(Context& c, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                                const Tensor& dout, const Tensor* dout2, Tensor& dgamma, Tensor& dbeta) {
  constexpr std::string_view op = "layer_norm_backward_params";
  const Rows s = check_backward(c, x, mean, rstd, dout, dout2, op);
  prepare_output(c, dgamma, {s.dim}, DType::F32, op, "dgamma");
  prepare_output(c, dbeta, {s.dim}, DType::F32, op, "dbeta");
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    const int64_t floats = cuda::layer_norm_backward_workspace(s.rows, s.dim);
    auto* workspace = static_cast<float*>(c.scratch(static_cast<size_t>(floats) * sizeof(float)));
    cuda::layer_norm_backward_params(s.rows, s.dim, x.device_data<float>(), mean.device_data<float>(),
                                     rstd.device_data<float>(), dout.device_data<float>(), data_or_null(dout2),
                                     dgamma.device_data<float>(), dbeta.device_data<float>(), workspace, stream(c));
#endif
    return;
  }
  cpu::layer_norm_backward_params(s.rows, s.dim, x.data<float>(), mean.data<float>(), rstd.data<float>(),
                                  dout.data<float>(), data_or_null(dout2), dgamma.data<float>(), dbeta.data<float>());
}

}  // namespace fp8kit::ops
