// ActivationOut's checks and sizing, and the CPU's route to the fp8 bytes: the bf16 result through
// ops::quantize (the definition of those bytes).
#include "ops/activation_out.h"

#include "base/error.h"
#include "ops/quantize.h"
#include "ops/tensor_checks.h"

#include <fmt/ranges.h>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/activation_out.h"
#include "ops/cuda/context.h"
#include "runtime/cuda/check.h"
#endif

namespace fp8kit::ops::detail {

void prepare_activation_out(const Context& c, const ActivationOut& out, int64_t rows, int64_t cols,
                            std::string_view op) {
  FP8KIT_CHECK((out.bf16 != nullptr) != (out.fp8 != nullptr),
               "{}: the ActivationOut needs exactly one of bf16 and fp8 set (got {})", op,
               out.bf16 != nullptr ? "both" : "neither");
  if (out.bf16 != nullptr) {
    FP8KIT_CHECK(out.scale == nullptr, "{}: a bf16 ActivationOut takes no scale (set fp8 to quantize)", op);
    prepare_output(c, *out.bf16, {rows, cols}, DType::Bf16, op, "out.bf16");
    return;
  }
  const QuantSpec& spec = out.spec;
  FP8KIT_CHECK(spec.format == Fp8Format::E4M3, "{}: an fp8 ActivationOut is E4M3 (GEMM activations), got {}", op,
               name(spec.format));
  FP8KIT_CHECK(spec.granularity == Granularity::PerTensor || spec.granularity == Granularity::PerRow,
               "{}: an fp8 ActivationOut is quantized per tensor (static scale) or per row (current scaling), got {}",
               op, name(spec.granularity));
  const bool per_tensor = spec.granularity == Granularity::PerTensor;
  if (per_tensor) {
    FP8KIT_CHECK(out.scale != nullptr, "{}: a per-tensor fp8 ActivationOut needs its scale ([1] f32, calibrated)", op);
    FP8KIT_CHECK(out.scale->dtype() == DType::F32 && out.scale->numel() == 1 && out.scale->device() == c.device(),
                 "{}: out.scale must be [1] f32 on the {}, got {} [{}] on the {}", op, name(c.device()),
                 name(out.scale->dtype()), fmt::join(out.scale->shape(), ", "), name(out.scale->device()));
  } else {
    FP8KIT_CHECK(out.scale == nullptr, "{}: a per-row fp8 ActivationOut computes its scales (pass no scale)", op);
  }
  QTensor& q = *out.fp8;
  sized(q.codes, {rows, cols}, DType::E4M3, c.device());
  sized(q.codes_t, {0}, DType::E4M3, c.device());
  for (Tensor* t : {&q.scale_inv, &q.amax}) {
    if (per_tensor) {
      sized(*t, {1}, DType::F32, c.device());
    } else {
      sized(*t, {rows, 1}, DType::F32, c.device());
    }
  }
  q.spec = spec;
}

Tensor& activation_bf16(const ActivationOut& out, int64_t rows, int64_t cols, Tensor& staging) {
  if (out.bf16 != nullptr) return *out.bf16;
  sized(staging, {rows, cols}, DType::Bf16, Device::Cpu);
  return staging;
}

void finish_activation_out(Context& c, const ActivationOut& out, const Tensor& staging) {
  if (out.fp8 != nullptr) quantize(c, staging, out.spec, *out.fp8, out.scale);
}

#if FP8KIT_HAVE_CUDA
cuda::ActivationOutArgs activation_out_args(Context& c, const ActivationOut& out) {
  cuda::ActivationOutArgs args;
  if (out.bf16 != nullptr) {
    args.bf16 = out.bf16->device_data<uint16_t>();
    return args;
  }
  QTensor& q = *out.fp8;
  args.codes = q.codes.device_data<uint8_t>();
  args.scale_inv = q.scale_inv.device_data<float>();
  args.amax = q.amax.device_data<float>();
  if (out.spec.granularity == Granularity::PerTensor) {
    args.kind = cuda::OutKind::PerTensor;
    args.scale = out.scale->device_data<float>();
    if (out.record_amax) {
      FP8KIT_CUDA_CHECK(cudaMemsetAsync(args.amax, 0, sizeof(float), stream(c)));
    } else {
      args.amax = nullptr;
    }
  } else {
    args.kind = cuda::OutKind::PerRow;
    args.fp8_max = fp8_max(out.spec.format);
    args.margin = out.spec.options.margin;
    args.power_of_two = out.spec.options.power_of_two;
  }
  return args;
}
#endif

}  // namespace fp8kit::ops::detail
