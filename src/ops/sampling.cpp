// Greedy sampling on Tensors: argument checks, then the CPU core (ops/cpu/sampling.h) or the GPU
// kernel (ops/cuda/sampling.h) on the context's current lane.
#include "ops/sampling.h"

#include "base/error.h"
#include "ops/cpu/sampling.h"
#include "ops/tensor_checks.h"

#include <fmt/ranges.h>

#include <limits>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/context.h"
#include "ops/cuda/sampling.h"
#endif

namespace fp8kit::ops {

void argmax_rows(Context& c, const Tensor& logits, Tensor& ids) {
  constexpr std::string_view op = "argmax_rows";
  FP8KIT_CHECK(logits.rank() == 2 && (logits.dtype() == DType::F32 || logits.dtype() == DType::Bf16),
               "{}: logits must be [rows, n] f32 or bf16, got {} [{}]", op, name(logits.dtype()),
               fmt::join(logits.shape(), ", "));
  check_tensor(c, logits, logits.shape(), logits.dtype(), op, "logits");
  const int64_t rows = logits.dim(0), n = logits.dim(1);
  FP8KIT_CHECK(n <= std::numeric_limits<int32_t>::max(), "{}: rows of {} logits do not fit i32 ids", op, n);
  prepare_output(c, ids, {rows}, DType::I32, op, "ids");
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    cuda::argmax_rows(rows, n, logits.device_data<std::byte>(), logits.dtype(), ids.device_data<int32_t>(), stream(c));
#endif
    return;
  }
  if (logits.dtype() == DType::F32) {
    cpu::argmax_rows(rows, n, logits.data<float>(), ids.data<int32_t>());
  } else {
    cpu::argmax_rows(rows, n, logits.data<uint16_t>(), ids.data<int32_t>());
  }
}

}  // namespace fp8kit::ops
