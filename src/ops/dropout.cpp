// Dropout of Tensors: argument checks, then the span functions of ops/cpu/dropout.cpp on the CPU or
// the kernels of ops/cuda/dropout.h on the context's current lane.
#include "ops/dropout.h"

#include "base/error.h"
#include "ops/tensor_checks.h"
#include "tensor/tensor.h"

#include <algorithm>
#include <string_view>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/context.h"
#endif

namespace fp8kit::ops {

namespace {

// spec and in checked, out sized as in.
void prepare(Context& c, const DropoutSpec& spec, const Tensor& in, Tensor& out, std::string_view op,
             std::string_view in_name, std::string_view out_name) {
  check_dropout(spec, op);
  check_tensor(c, in, in.shape(), DType::F32, op, in_name);
  FP8KIT_CHECK(in.numel() <= int64_t{UINT32_MAX}, "{}: {} has {} elements; dropout masks index at most 2^32: split it",
               op, in_name, in.numel());
  if (&in != &out) prepare_output(c, out, in.shape(), DType::F32, op, out_name);
}

// The forward or backward of `spec` from in to out (checked).
void run(Context& c, const DropoutSpec& spec, bool bf16, const Tensor& in, Tensor& out, bool forward) {
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    (forward ? cuda::dropout_forward : cuda::dropout_backward)(dropout_site(c, spec), bf16, in.device_data<float>(),
                                                               out.device_data<float>(), in.numel(), stream(c));
#endif
    return;
  }
  if (const std::optional<DropoutMask> mask = dropout_mask(c, spec)) {
    if (forward) {
      dropout_forward(*mask, spec.rate, bf16, in.span<float>(), out.span<float>());
    } else {
      dropout_backward(*mask, spec.rate, bf16, in.span<float>(), out.span<float>());
    }
  } else if (out.data<float>() != in.data<float>()) {
    std::copy_n(in.data<float>(), in.numel(), out.data<float>());
  }
}

}  // namespace

void dropout_forward(Context& c, const Tensor& x, bool bf16, const DropoutSpec& spec, Tensor& out) {
  prepare(c, spec, x, out, "dropout_forward", "x", "out");
  run(c, spec, bf16, x, out, true);
}

void dropout_backward(Context& c, const Tensor& dy, bool bf16, const DropoutSpec& spec, Tensor& dx) {
  prepare(c, spec, dy, dx, "dropout_backward", "dy", "dx");
  run(c, spec, bf16, dy, dx, false);
}

}  // namespace fp8kit::ops
