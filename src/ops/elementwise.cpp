// Element-wise ops on Tensors: argument checks, then the CPU cores or the GPU kernels on the context's
// current lane.
#include "ops/elementwise.h"

#include "base/error.h"
#include "numerics/convert.h"
#include "ops/cpu/elementwise.h"
#include "ops/tensor_checks.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <vector>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/context.h"
#include "ops/cuda/convert.h"
#include "ops/cuda/elementwise.h"
#include "runtime/cuda/check.h"
#endif

namespace fp8kit::ops {

void copy(Context& c, const Tensor& src, Tensor& dst) {
  FP8KIT_CHECK(src.dtype() == dst.dtype() && src.numel() == dst.numel() && src.device() == c.device() &&
                   dst.device() == c.device(),
               "copy: the source ({} {} values) and destination ({} {} values) must match, on the context's device",
               src.numel(), name(src.dtype()), dst.numel(), name(dst.dtype()));
  if (src.nbytes() == 0) return;
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    FP8KIT_CUDA_CHECK(cudaMemcpyAsync(dst.device_data<std::byte>(), src.device_data<std::byte>(), src.nbytes(),
                                      cudaMemcpyDeviceToDevice, stream(c)));
#endif
    return;
  }
  std::copy_n(src.data<std::byte>(), src.nbytes(), dst.data<std::byte>());
}

void convert(Context& c, const Tensor& src, DType dtype, Tensor& out) {
  constexpr std::string_view op = "convert";
  FP8KIT_CHECK(src.dtype() == DType::F32 || src.dtype() == DType::Bf16, "{}: src must be f32 or bf16, got {}", op,
               name(src.dtype()));
  FP8KIT_CHECK(dtype == DType::F32 || dtype == DType::Bf16, "{}: to f32 or bf16, not {}", op, name(dtype));
  FP8KIT_CHECK(&out != &src, "{}: out must not be src", op);
  check_tensor(c, src, src.shape(), src.dtype(), op, "src");
  prepare_output(c, out, src.shape(), dtype, op, "out");
  if (dtype == src.dtype()) {
    copy(c, src, out);
    return;
  }
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    if (dtype == DType::Bf16) {
      cuda::float_to_bf16(src.device_data<float>(), src.numel(), out.device_data<uint16_t>(), stream(c));
    } else {
      cuda::bf16_to_float(src.device_data<uint16_t>(), src.numel(), out.device_data<float>(), stream(c));
    }
#endif
    return;
  }
  if (dtype == DType::Bf16) {
    float_to_bf16(src.span<float>(), out.span<uint16_t>());
  } else {
    bf16_to_float(src.span<uint16_t>(), out.span<float>());
  }
}

void add(Context& c, const Tensor& a, const Tensor& b, bool bf16, Tensor& out) {
  constexpr std::string_view op = "add";
  check_tensor(c, a, a.shape(), DType::F32, op, "a");
  check_tensor(c, b, a.shape(), DType::F32, op, "b (a's shape)");
  if (&out != &a && &out != &b) prepare_output(c, out, a.shape(), DType::F32, op, "out");
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    cuda::add(a.device_data<float>(), b.device_data<float>(), bf16, out.device_data<float>(), a.numel(), stream(c));
#endif
    return;
  }
  cpu::add(a.span<float>(), b.span<float>(), bf16, out.span<float>());
}

void sum_dropout_backward(Context& c, const Tensor& a, std::span<const Tensor* const> rest, bool bf16,
                          const DropoutSpec& spec, Tensor& out) {
  constexpr std::string_view op = "sum_dropout_backward";
  check_dropout(spec, op);
  FP8KIT_CHECK(rest.size() >= 1 && rest.size() <= 3, "{}: takes 1 to 3 tensors after a, got {}", op, rest.size());
  check_tensor(c, a, a.shape(), DType::F32, op, "a");
  bool out_is_input = &out == &a;
  std::array<const Tensor*, 3> more{};
  for (size_t k = 0; k < rest.size(); ++k) {
    FP8KIT_CHECK(rest[k] != nullptr, "{}: tensor {} after a is null", op, k + 1);
    check_tensor(c, *rest[k], a.shape(), DType::F32, op, fmt::format("tensor {} after a (a's shape)", k + 1));
    out_is_input = out_is_input || &out == rest[k];
    more[k] = rest[k];
  }
  FP8KIT_CHECK(a.numel() <= int64_t{UINT32_MAX}, "{}: a has {} elements; dropout masks index at most 2^32: split it",
               op, a.numel());
  if (!out_is_input) prepare_output(c, out, a.shape(), DType::F32, op, "out");
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    const auto data = [](const Tensor* t) { return t != nullptr ? t->device_data<float>() : nullptr; };
    cuda::residual_gradient(a.device_data<float>(), more[0]->device_data<float>(), data(more[1]), data(more[2]),
                            dropout_site(c, spec), bf16, out.device_data<float>(), a.numel(), stream(c));
#endif
    return;
  }
  std::vector<std::span<const float>> spans;
  for (const Tensor* t : rest) spans.push_back(t->span<float>());
  cpu::sum(a.span<float>(), spans, out.span<float>());
  if (const auto mask = dropout_mask(c, spec)) {
    dropout_backward(*mask, spec.rate, bf16, out.span<float>(), out.span<float>());
  }
}

}  // namespace fp8kit::ops
