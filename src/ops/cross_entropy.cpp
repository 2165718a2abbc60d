// Softmax cross-entropy on Tensors: argument checks, then the CPU core (ops/cpu/cross_entropy.h) or
// the GPU kernel (ops/cuda/cross_entropy.h) on the context's current lane.
#include "ops/cross_entropy.h"

#include "base/error.h"
#include "ops/cpu/cross_entropy.h"
#include "ops/tensor_checks.h"

#include <fmt/ranges.h>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/context.h"
#include "ops/cuda/cross_entropy.h"
#endif

namespace fp8kit::ops {

void cross_entropy(Context& c, const Tensor& logits, const Tensor& targets, float grad_scale, Tensor& losses,
                   Tensor* dlogits) {
  constexpr std::string_view op = "cross_entropy";
  FP8KIT_CHECK(logits.rank() == 2 && logits.dim(1) >= 1,
               "{}: logits must be [rows, vocab] with vocab >= 1, got [{}]: view [batch, seq, vocab] as "
               "[batch * seq, vocab]",
               op, fmt::join(logits.shape(), ", "));
  const int64_t rows = logits.dim(0), vocab = logits.dim(1);
  check_tensor(c, logits, logits.shape(), DType::F32, op, "logits");
  check_tensor(c, targets, {rows}, DType::I32, op, "targets (one per row of logits)");
  prepare_output(c, losses, {rows}, DType::F32, op, "losses");
  if (dlogits != nullptr) prepare_output(c, *dlogits, {rows, vocab}, DType::F32, op, "dlogits");
  float* d = nullptr;
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    if (dlogits != nullptr) d = dlogits->device_data<float>();
    cuda::cross_entropy(rows, vocab, logits.device_data<float>(), targets.device_data<int32_t>(), grad_scale,
                        losses.device_data<float>(), d, stream(c));
#endif
    return;
  }
  if (dlogits != nullptr) d = dlogits->data<float>();
  cpu::cross_entropy(rows, vocab, logits.data<float>(), targets.data<int32_t>(), grad_scale, losses.data<float>(), d);
}

}  // namespace fp8kit::ops
