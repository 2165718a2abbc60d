// Mean pooling on Tensors: argument checks, then the CPU core and the dropout span functions, or the
// fused GPU kernels on the context's current lane.
#include "ops/mean_pool.h"

#include "base/error.h"
#include "ops/cpu/mean_pool.h"
#include "ops/tensor_checks.h"

#include <fmt/ranges.h>

#include <vector>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/context.h"
#include "ops/cuda/mean_pool.h"
#endif

namespace fp8kit::ops {

void mean_pool_forward(Context& c, const Tensor& x, bool bf16, const DropoutSpec& spec, Tensor& out) {
  constexpr std::string_view op = "mean_pool_forward";
  check_dropout(spec, op);
  FP8KIT_CHECK(x.rank() == 3 && x.dim(1) >= 1, "{}: x must be [batch, seq, dim] with seq >= 1, got [{}]", op,
               fmt::join(x.shape(), ", "));
  check_tensor(c, x, x.shape(), DType::F32, op, "x");
  const int64_t batch = x.dim(0), seq = x.dim(1), dim = x.dim(2);
  prepare_output(c, out, {batch, dim}, DType::F32, op, "out");
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    cuda::mean_pool_forward(x.device_data<float>(), batch, seq, dim, bf16, dropout_site(c, spec),
                            out.device_data<float>(), stream(c));
#endif
    return;
  }
  cpu::mean_pool_forward(x.span<float>(), batch, seq, dim, bf16, out.span<float>());
  if (const auto mask = dropout_mask(c, spec)) {
    dropout_forward(*mask, spec.rate, bf16, out.span<float>(), out.span<float>());
  }
}

void mean_pool_backward(Context& c, const Tensor& dout, int64_t seq, bool bf16, const DropoutSpec& spec, Tensor& dx) {
  constexpr std::string_view op = "mean_pool_backward";
  check_dropout(spec, op);
  FP8KIT_CHECK(seq >= 1, "{}: seq must be at least 1, got {}", op, seq);
  FP8KIT_CHECK(dout.rank() == 2, "{}: dout must be [batch, dim], got [{}]", op, fmt::join(dout.shape(), ", "));
  check_tensor(c, dout, dout.shape(), DType::F32, op, "dout");
  const int64_t batch = dout.dim(0), dim = dout.dim(1);
  prepare_output(c, dx, {batch, seq, dim}, DType::F32, op, "dx");
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    cuda::mean_pool_backward(dout.device_data<float>(), dropout_site(c, spec), bf16, batch, seq, dim,
                             dx.device_data<float>(), stream(c));
#endif
    return;
  }
  if (const auto mask = dropout_mask(c, spec)) {
    std::vector<float> dropped(static_cast<size_t>(dout.numel()));
    dropout_backward(*mask, spec.rate, bf16, dout.span<float>(), dropped);
    cpu::mean_pool_backward(dropped, batch, seq, dim, dx.span<float>());
  } else {
    cpu::mean_pool_backward(dout.span<float>(), batch, seq, dim, dx.span<float>());
  }
}

}  // namespace fp8kit::ops
