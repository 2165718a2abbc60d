// Tensor-level quantization: argument checks, then numerics' bulk casts on the CPU or the fused
// quantize kernel on the GPU (bit-identical to them).
#include "ops/quantize.h"

#include "base/error.h"
#include "numerics/convert.h"

#include <fmt/ranges.h>

#include <cmath>
#include <vector>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/convert.h"
#include "ops/cuda/quantize.h"
#endif

namespace fp8kit::ops {

namespace {

struct Matrix {
  int64_t rows, cols;
};

// Checks x and returns it as a matrix.
Matrix input_matrix(const Tensor& x) {
  FP8KIT_CHECK(x.rank() == 1 || x.rank() == 2, "quantize_fp8: x must be [rows, cols] or [n], got shape [{}]",
               fmt::join(x.shape(), ", "));
  FP8KIT_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::Bf16, "quantize_fp8: x must be f32 or bf16, got {}",
               name(x.dtype()));
  return x.rank() == 1 ? Matrix{1, x.dim(0)} : Matrix{x.dim(0), x.dim(1)};
}

float host_scalar(const Tensor& t) {
  return t.device() == Device::Cpu ? t.data<float>()[0] : t.to(Device::Cpu).data<float>()[0];
}

Tensor scalar(float value, Device device) {
  Tensor cpu({1}, DType::F32);
  cpu.data<float>()[0] = value;
  return cpu.to(device);
}

void quantize_cpu(const Tensor& x, Matrix m, Fp8Format format, float scale, Fp8Tensor& out) {
  auto codes = out.data.span<uint8_t>();
  const float amax = x.dtype() == DType::F32 ? fp8kit::quantize_fp8(x.span<float>(), scale, format, codes)
                                             : fp8kit::quantize_fp8(x.span<uint16_t>(), scale, format, codes);
  out.amax.data<float>()[0] = amax;
  out.scale_inv.data<float>()[0] = 1.0f / scale;
  if (out.data_t.numel() == 0) return;
  uint8_t* t = out.data_t.data<uint8_t>();
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t c = 0; c < m.cols; ++c) t[c * m.rows + r] = codes[r * m.cols + c];
}

#if FP8KIT_HAVE_CUDA
// The fused kernel's arguments for x with `scale` (one float on the GPU); outputs left unset.
cuda::QuantizeArgs cuda_args(const Tensor& x, Matrix m, Fp8Format format, const Tensor& scale) {
  cuda::QuantizeArgs args;
  args.x = x.device_data<std::byte>();
  args.x_type = x.dtype();
  args.rows = m.rows;
  args.cols = m.cols;
  args.format = format;
  args.scale = scale.device_data<float>();
  return args;
}
#endif

// max |x|, NaN ignored, inf counted, on the host.
float amax_of(const Tensor& x, Matrix m) {
  if (x.device() == Device::Cpu) {
    if (x.dtype() == DType::F32) return amax(x.span<float>());
    std::vector<float> values(x.numel());
    bf16_to_float(x.span<uint16_t>(), values);
    return amax(values);
  }
  Tensor result({1}, DType::F32, x.device());  // zeroed: the kernel raises it
#if FP8KIT_HAVE_CUDA
  const Tensor one = scalar(1.0f, x.device());
  cuda::QuantizeArgs args = cuda_args(x, m, Fp8Format::E4M3, one);  // no outputs: an amax-only pass
  args.amax = result.device_data<float>();
  cuda::quantize_fp8(args);
#endif
  return host_scalar(result);
}

// quantize_fp8 with `scale` checked, and its value s on the host.
Fp8Tensor quantize_checked(const Tensor& x, Matrix m, Fp8Format format, const Tensor& scale, float s, bool transpose) {
  const Device device = x.device();
  Fp8Tensor out{Tensor(x.rank() == 1 ? std::vector<int64_t>{m.cols} : std::vector<int64_t>{m.rows, m.cols},
                       dtype_of(format), device),
                transpose ? Tensor({m.cols, m.rows}, dtype_of(format), device) : Tensor({0}, dtype_of(format), device),
                Tensor({1}, DType::F32, device), Tensor({1}, DType::F32, device)};
  if (device == Device::Cpu) {
    quantize_cpu(x, m, format, s, out);
    return out;
  }
#if FP8KIT_HAVE_CUDA
  cuda::QuantizeArgs args = cuda_args(x, m, format, scale);
  args.q = out.data.device_data<uint8_t>();
  args.q_t = transpose ? out.data_t.device_data<uint8_t>() : nullptr;
  args.amax = out.amax.device_data<float>();  // zeroed by Tensor's constructor
  args.scale_inv = out.scale_inv.device_data<float>();
  cuda::quantize_fp8(args);
#endif
  return out;
}

}  // namespace

Fp8Tensor quantize_fp8(const Tensor& x, Fp8Format format, const Tensor& scale, bool transpose) {
  const Matrix m = input_matrix(x);
  FP8KIT_CHECK(scale.dtype() == DType::F32 && scale.numel() == 1 && scale.device() == x.device(),
               "quantize_fp8: scale must be one f32 on {} (x's device), got {} [{}] on {}", name(x.device()),
               name(scale.dtype()), fmt::join(scale.shape(), ", "), name(scale.device()));
  const float s = host_scalar(scale);
  FP8KIT_CHECK(std::isfinite(s) && s > 0, "quantize_fp8: scale must be finite and > 0, got {}", s);
  return quantize_checked(x, m, format, scale, s, transpose);
}

Fp8Tensor quantize_fp8_current(const Tensor& x, Fp8Format format, ScaleOptions options, bool transpose) {
  const Matrix m = input_matrix(x);
  const float s = current_scale(amax_of(x, m), format, options);  // finite and > 0
  return quantize_checked(x, m, format, scalar(s, x.device()), s, transpose);
}

Tensor dequantize(const Fp8Tensor& q) {
  const Fp8Format format = fp8_format(q.data.dtype());
  Tensor out(q.data.shape(), DType::F32, q.data.device());
  if (q.data.device() == Device::Cpu) {
    fp8kit::dequantize_fp8(q.data.span<uint8_t>(), format, q.scale_inv.data<float>()[0], out.span<float>());
    return out;
  }
#if FP8KIT_HAVE_CUDA
  cuda::dequantize_fp8(q.data.device_data<uint8_t>(), q.data.numel(), format, q.scale_inv.device_data<float>(),
                       out.device_data<float>());
#endif
  return out;
}

}  // namespace fp8kit::ops
