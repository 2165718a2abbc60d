// The GELU inference op: argument checks, the CPU core, the dispatch to the GPU kernel (ops/cuda/gelu.h).
#include "ops/gelu.h"

#include "base/error.h"
#include "numerics/cast.h"
#include "ops/activation.h"
#include "ops/tensor_checks.h"

#include <fmt/ranges.h>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/activation_out.h"
#include "ops/cuda/context.h"
#include "ops/cuda/gelu.h"
#endif

namespace fp8kit::ops {

void gelu(Context& c, const Tensor& x, const ActivationOut& out) {
  constexpr std::string_view op = "gelu";
  FP8KIT_CHECK(x.rank() == 2, "{}: x must be [rows, cols] bf16, got [{}]", op, fmt::join(x.shape(), ", "));
  const int64_t rows = x.dim(0), cols = x.dim(1);
  check_tensor(c, x, x.shape(), DType::Bf16, op, "x");
  FP8KIT_CHECK(out.bf16 == nullptr || !out.bf16->shares_storage(x), "{}: out.bf16 must be a tensor of its own (not x)",
               op);
  detail::prepare_activation_out(c, out, rows, cols, op);
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    cuda::gelu(rows, cols, x.device_data<uint16_t>(), detail::activation_out_args(c, out), stream(c));
#endif
    return;
  }
  Tensor staging;
  Tensor& y = detail::activation_bf16(out, rows, cols, staging);
  const uint16_t* in = x.data<uint16_t>();
  uint16_t* o = y.data<uint16_t>();
  const int64_t n = rows * cols;
#pragma omp parallel for schedule(static) if (n >= 65536)
  for (int64_t i = 0; i < n; ++i) o[i] = float_to_bf16(ops::gelu(bf16_to_float(in[i])));
  detail::finish_activation_out(c, out, staging);
}

}  // namespace fp8kit::ops
