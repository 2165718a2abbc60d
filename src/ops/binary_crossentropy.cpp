// Sigmoid + binary cross-entropy on Tensors: argument checks, then the CPU cores or the one-block GPU
// kernel on the context's current lane.
#include "ops/binary_crossentropy.h"

#include "base/error.h"
#include "ops/cpu/binary_crossentropy.h"
#include "ops/linear.h"
#include "ops/tensor_checks.h"

#include <fmt/ranges.h>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/binary_crossentropy.h"
#include "ops/cuda/context.h"
#include "ops/cuda/linear.h"
#endif

namespace fp8kit::ops {

void sigmoid_binary_crossentropy(Context& c, const Tensor& z, const Tensor* labels, bool bf16, Tensor& probs,
                                 Tensor& loss, Tensor& dz, LinearOp* producer) {
  constexpr std::string_view op = "sigmoid_binary_crossentropy";
  FP8KIT_CHECK(producer == nullptr || &z == &producer->y, "{}: a producer's deferred output is its y", op);
  FP8KIT_CHECK((z.rank() == 1 || (z.rank() == 2 && z.dim(1) == 1)) && z.numel() >= 1,
               "{}: z must be [batch] or [batch, 1] with batch >= 1, got [{}]", op, fmt::join(z.shape(), ", "));
  check_tensor(c, z, z.shape(), DType::F32, op, "z");
  const int64_t batch = z.dim(0);
  FP8KIT_CHECK(!c.is_cuda() || batch <= 1024, "{}: the GPU kernel takes batch <= 1024 (one block), got {}", op, batch);
  if (labels != nullptr) check_tensor(c, *labels, {batch}, DType::F32, op, "labels");
  prepare_output(c, probs, {batch}, DType::F32, op, "probs");
  if (labels != nullptr) {
    prepare_output(c, loss, {1}, DType::F32, op, "loss");
    prepare_output(c, dz, z.shape(), DType::F32, op, "dz");
  }
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    const bool train = labels != nullptr;
    cuda::sigmoid_binary_crossentropy(z.device_data<float>(), train ? labels->device_data<float>() : nullptr, batch,
                                      bf16, probs.device_data<float>(), train ? loss.device_data<float>() : nullptr,
                                      train ? dz.device_data<float>() : nullptr, stream(c),
                                      producer != nullptr ? deferred_epilogue(*producer) : cuda::LinearEpilogue{});
#endif
    return;
  }
  if (producer != nullptr) linear_finish(c, {&producer, 1});
  cpu::sigmoid(z.span<float>(), bf16, probs.span<float>());
  if (labels == nullptr) return;
  loss.data<float>()[0] = cpu::binary_crossentropy(probs.span<float>(), labels->span<float>());
  cpu::binary_crossentropy_sigmoid_backward(probs.span<float>(), labels->span<float>(), dz.span<float>());
}

}  // namespace fp8kit::ops
