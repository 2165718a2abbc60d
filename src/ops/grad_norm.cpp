// Gradient clipping on Tensors: argument checks, then the CPU core (ops/cpu/grad_norm.h) or the GPU
// kernels (ops/cuda/grad_norm.h) on the context's current lane.
#include "ops/grad_norm.h"

#include "base/error.h"
#include "ops/cpu/grad_norm.h"
#include "ops/tensor_checks.h"

#include <cmath>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/context.h"
#include "ops/cuda/grad_norm.h"
#endif

namespace fp8kit::ops {

void clip_by_global_norm(Context& c, Tensor& grads, float max_norm, Tensor& norm,
                         const std::function<void(Tensor& sum_of_squares)>& reduce_sum_of_squares) {
  constexpr std::string_view op = "clip_by_global_norm";
  check_tensor(c, grads, grads.shape(), DType::F32, op, "grads");
  FP8KIT_CHECK(std::isfinite(max_norm), "{}: max_norm must be finite (0 or less: no clipping), got {}", op, max_norm);
  FP8KIT_CHECK(!norm.shares_storage(grads), "{}: norm must be a tensor of its own, not a part of grads", op);
  prepare_output(c, norm, {1}, DType::F32, op, "norm");
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    const int64_t doubles = cuda::grad_norm_workspace(grads.numel());
    auto* workspace = static_cast<double*>(c.scratch(static_cast<size_t>(doubles) * sizeof(double)));
    const bool sharded = static_cast<bool>(reduce_sum_of_squares);
    cuda::sum_of_squares(grads.device_data<float>(), grads.numel(), !sharded, norm.device_data<float>(), workspace,
                         stream(c));
    if (sharded) reduce_sum_of_squares(norm);
    cuda::clip_to_norm(grads.device_data<float>(), grads.numel(), max_norm, norm.device_data<float>(), sharded,
                       stream(c));
#endif
    return;
  }
  float* g = grads.data<float>();
  const double sum = cpu::sum_of_squares(g, grads.numel());
  float total = static_cast<float>(std::sqrt(sum));
  if (reduce_sum_of_squares) {
    norm.data<float>()[0] = static_cast<float>(sum);
    reduce_sum_of_squares(norm);
    total = static_cast<float>(std::sqrt(static_cast<double>(norm.data<float>()[0])));
  }
  norm.data<float>()[0] = total;
  cpu::clip_to_norm(g, grads.numel(), total, max_norm);
}

}  // namespace fp8kit::ops
