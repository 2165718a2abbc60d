// Tensor-level quantization: argument checks, then numerics' casts (quantize_fp8 with a delayed scale,
// quantize_blocks with current ones) on the CPU, or the bit-identical kernels on the GPU: quantize.cu
// per tensor, block_quantize.cu per row, group and 128x128 block.
#include "ops/quantize.h"

#include "base/error.h"
#include "numerics/convert.h"

#include <fmt/ranges.h>

#include <cmath>
#include <vector>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/block_quantize.h"
#include "ops/cuda/quantize.h"
#endif

namespace fp8kit::ops {

namespace {

struct Matrix {
  int64_t rows, cols;
};

// Checks x and spec and returns x as a matrix.
Matrix check(const Tensor& x, const QuantSpec& spec, const Tensor* scale, bool transpose) {
  FP8KIT_CHECK(x.rank() == 1 || x.rank() == 2, "quantize: x must be [rows, cols] or [n], got shape [{}]",
               fmt::join(x.shape(), ", "));
  FP8KIT_CHECK(x.dtype() == DType::F32 || x.dtype() == DType::Bf16, "quantize: x must be f32 or bf16, got {}",
               name(x.dtype()));
  const Granularity g = spec.granularity;
  FP8KIT_CHECK(g != Granularity::PerGroup || spec.group == 32 || spec.group == 64 || spec.group == 128,
               "quantize: a 1 x G group needs G = 32, 64 or 128, got {}", spec.group);
  FP8KIT_CHECK(scale == nullptr || g == Granularity::PerTensor,
               "quantize: a delayed scale applies per tensor only; {} granularity takes current scales (pass no scale)",
               name(g));
  FP8KIT_CHECK(!transpose || g == Granularity::PerTensor || g == Granularity::Block128x128,
               "quantize: transposed codes need per-tensor or 128x128 scales ({} scales do not transpose): quantize "
               "x^T itself",
               name(g));
  return x.rank() == 1 ? Matrix{1, x.dim(0)} : Matrix{x.dim(0), x.dim(1)};
}

float host_scalar(const Tensor& t) {
  return t.device() == Device::Cpu ? t.data<float>()[0] : t.to(Device::Cpu).data<float>()[0];
}

// The output tensors for x at spec, on x's device (amax zeroed: the per-tensor kernel raises it).
QTensor allocate(const Tensor& x, Matrix m, const QuantSpec& spec, bool transpose) {
  const Device device = x.device();
  const DType codes = dtype_of(spec.format);
  const BlockShape b = spec.block(m.rows, m.cols);
  const int64_t grid_rows = (m.rows + static_cast<int64_t>(b.rows) - 1) / static_cast<int64_t>(b.rows);
  const int64_t grid_cols = (m.cols + static_cast<int64_t>(b.cols) - 1) / static_cast<int64_t>(b.cols);
  const std::vector<int64_t> grid =
      spec.granularity == Granularity::PerTensor ? std::vector<int64_t>{1} : std::vector<int64_t>{grid_rows, grid_cols};
  return QTensor{Tensor(x.shape(), codes, device),
                 transpose ? Tensor({m.cols, m.rows}, codes, device) : Tensor({0}, codes, device),
                 Tensor(grid, DType::F32, device), Tensor(grid, DType::F32, device), spec};
}

// x's elements as floats: f32 tensors as they are, bf16 ones widened (exactly) into `widened`.
std::span<const float> float_values(const Tensor& x, std::vector<float>& widened) {
  if (x.dtype() == DType::F32) return x.span<float>();
  widened.resize(x.numel());
  bf16_to_float(x.span<uint16_t>(), widened);
  return widened;
}

void quantize_cpu(const Tensor& x, Matrix m, const float* delayed_scale, QTensor& q) {
  std::vector<float> widened;
  const std::span<const float> values = float_values(x, widened);
  auto codes = q.codes.span<uint8_t>();
  if (delayed_scale != nullptr) {
    q.amax.data<float>()[0] = fp8kit::quantize_fp8(values, *delayed_scale, q.spec.format, codes);
    q.scale_inv.data<float>()[0] = 1.0f / *delayed_scale;
  } else if (m.rows * m.cols == 0) {
    // Per tensor: current_scale of amax 0; the other grids are empty.
    if (q.spec.granularity == Granularity::PerTensor) q.scale_inv.data<float>()[0] = 1.0f;
  } else {
    quantize_blocks(values, m.rows, m.cols, q.spec.format, q.block(), q.spec.options, codes, q.scale_inv.span<float>(),
                    q.amax.span<float>());
  }
  if (q.codes_t.numel() == 0) return;
  uint8_t* t = q.codes_t.data<uint8_t>();
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t c = 0; c < m.cols; ++c) t[c * m.rows + r] = codes[r * m.cols + c];
}

#if FP8KIT_HAVE_CUDA
Tensor scalar(float value, Device device) {
  Tensor cpu({1}, DType::F32);
  cpu.data<float>()[0] = value;
  return cpu.to(device);
}

// Per tensor with `scale` (one float on the GPU; `amax_only`: no outputs but the amax).
void quantize_tensor_cuda(const Tensor& x, Matrix m, const Tensor& scale, QTensor& q, bool amax_only) {
  cuda::QuantizeArgs args;
  args.x = x.device_data<std::byte>();
  args.x_type = x.dtype();
  args.rows = m.rows;
  args.cols = m.cols;
  args.format = q.spec.format;
  args.scale = scale.device_data<float>();
  args.amax = q.amax.device_data<float>();  // zeroed by Tensor's constructor
  if (!amax_only) {
    args.q = q.codes.device_data<uint8_t>();
    args.q_t = q.codes_t.numel() > 0 ? q.codes_t.device_data<uint8_t>() : nullptr;
    args.scale_inv = q.scale_inv.device_data<float>();
  }
  cuda::quantize_fp8(args);
}

void quantize_blocks_cuda(const Tensor& x, Matrix m, QTensor& q) {
  cuda::BlockQuantizeArgs args;
  args.x = x.device_data<std::byte>();
  args.x_type = x.dtype();
  args.rows = m.rows;
  args.cols = m.cols;
  args.format = q.spec.format;
  const Granularity g = q.spec.granularity;
  args.kind = g == Granularity::PerRow         ? cuda::BlockKind::Row
              : g == Granularity::Block128x128 ? cuda::BlockKind::Tile128
                                               : cuda::BlockKind::Group;
  args.group = g == Granularity::Block1x128 ? 128 : q.spec.group;
  args.options = q.spec.options;
  args.q = q.codes.device_data<uint8_t>();
  args.q_t = q.codes_t.numel() > 0 ? q.codes_t.device_data<uint8_t>() : nullptr;
  args.scale_inv = q.scale_inv.device_data<float>();
  args.amax = q.amax.device_data<float>();
  cuda::quantize_blocks(args);
}
#endif

}  // namespace

QTensor quantize(const Tensor& x, const QuantSpec& spec, const Tensor* scale, bool transpose) {
  const Matrix m = check(x, spec, scale, transpose);
  const Device device = x.device();
  float s = 0.0f;
  if (scale != nullptr) {
    FP8KIT_CHECK(scale->dtype() == DType::F32 && scale->numel() == 1 && scale->device() == device,
                 "quantize: scale must be one f32 on {} (x's device), got {} [{}] on {}", name(device),
                 name(scale->dtype()), fmt::join(scale->shape(), ", "), name(scale->device()));
    s = host_scalar(*scale);
    FP8KIT_CHECK(std::isfinite(s) && s > 0, "quantize: scale must be finite and > 0, got {}", s);
  }
  QTensor q = allocate(x, m, spec, transpose);
  if (device == Device::Cpu) {
    quantize_cpu(x, m, scale != nullptr ? &s : nullptr, q);
    return q;
  }
#if FP8KIT_HAVE_CUDA
  if (spec.granularity != Granularity::PerTensor) {
    quantize_blocks_cuda(x, m, q);
  } else if (scale != nullptr) {
    quantize_tensor_cuda(x, m, *scale, q, false);
  } else {
    // Current per-tensor scaling: an amax-only pass, the scale on the host as numerics computes it, the cast.
    quantize_tensor_cuda(x, m, scalar(1.0f, device), q, true);
    const float amax = host_scalar(q.amax);
    const Tensor current = scalar(current_scale(amax, spec.format, spec.options), device);
    q.amax = Tensor({1}, DType::F32, device);  // raised again by the cast: the same value
    quantize_tensor_cuda(x, m, current, q, false);
  }
#endif
  return q;
}

Tensor dequantize(const QTensor& q) {
  const Fp8Format format = fp8_format(q.codes.dtype());
  Tensor out(q.codes.shape(), DType::F32, q.codes.device());
  const BlockShape b = q.block();
  if (q.codes.numel() == 0) return out;
  if (q.codes.device() == Device::Cpu) {
    dequantize_blocks(q.codes.span<uint8_t>(), q.rows(), q.cols(), format, b, q.scale_inv.span<float>(),
                      out.span<float>());
    return out;
  }
#if FP8KIT_HAVE_CUDA
  cuda::dequantize_blocks(q.codes.device_data<uint8_t>(), q.rows(), q.cols(), format, static_cast<int64_t>(b.rows),
                          static_cast<int64_t>(b.cols),
                          q.scale_inv.device_data<float>(), out.device_data<float>());
#endif
  return out;
}

}  // namespace fp8kit::ops
