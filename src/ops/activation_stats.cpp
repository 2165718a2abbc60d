// Calibration statistics on Tensors: argument checks, then the CPU core (ops/cpu/activation_stats.h)
// or the GPU kernel (ops/cuda/activation_stats.h) on the context's current lane.
#include "ops/activation_stats.h"

#include "base/error.h"
#include "numerics/histogram.h"
#include "ops/cpu/activation_stats.h"
#include "ops/tensor_checks.h"

#include <fmt/ranges.h>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/activation_stats.h"
#include "ops/cuda/context.h"
#endif

namespace fp8kit::ops {

void accumulate_activation_stats(Context& c, const Tensor& x, Tensor& channel_amax, Tensor* histogram) {
  constexpr std::string_view op = "accumulate_activation_stats";
  FP8KIT_CHECK(x.rank() == 2, "{}: x must be [rows, cols] (view [batch, seq, dim] as [batch * seq, dim]), got [{}]",
               op, fmt::join(x.shape(), ", "));
  FP8KIT_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::Bf16, "{}: x must be f32 or bf16, got {}", op,
               name(x.dtype()));
  const int64_t rows = x.dim(0), cols = x.dim(1);
  check_tensor(c, x, x.shape(), x.dtype(), op, "x");
  check_tensor(c, channel_amax, {cols}, DType::F32, op, "channel_amax (one per column of x, zeroed first)");
  if (histogram != nullptr)
    check_tensor(c, *histogram, {kHistogramBins}, DType::I32, op, "histogram (kHistogramBins counts, zeroed first)");
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    cuda::accumulate_activation_stats(rows, cols, x.device_data<std::byte>(), x.dtype(),
                                      channel_amax.device_data<float>(),
                                      histogram != nullptr ? histogram->device_data<int32_t>() : nullptr, stream(c));
#endif
    return;
  }
  int32_t* counts = histogram != nullptr ? histogram->data<int32_t>() : nullptr;
  if (x.dtype() == DType::F32) {
    cpu::accumulate_activation_stats(rows, cols, x.data<float>(), channel_amax.data<float>(), counts);
  } else {
    cpu::accumulate_activation_stats(rows, cols, x.data<uint16_t>(), channel_amax.data<float>(), counts);
  }
}

}  // namespace fp8kit::ops
