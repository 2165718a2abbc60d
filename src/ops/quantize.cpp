// Tensor-level quantization: argument checks, then numerics' casts (quantize_fp8 with a delayed scale,
// quantize_blocks with current ones) on the CPU, or the bit-identical kernels on the GPU: quantize.cu
// per tensor, block_quantize.cu per row, group and 128x128 block.
#include "ops/quantize.h"

#include "base/error.h"
#include "numerics/convert.h"
#include "ops/tensor_checks.h"

#include <fmt/ranges.h>

#include <cmath>
#include <utility>
#include <vector>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/block_quantize.h"
#include "ops/cuda/context.h"
#include "ops/cuda/gemm_scales.h"
#include "ops/cuda/quantize.h"
#include "runtime/cuda/check.h"
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

// Sizes q's tensors for x at spec on x's device, reusing their storage.
void size_outputs(const Tensor& x, Matrix m, const QuantSpec& spec, bool transpose, QTensor& q) {
  const Device device = x.device();
  const DType codes = dtype_of(spec.format);
  if (x.rank() == 1) {
    sized(q.codes, {m.cols}, codes, device);
  } else {
    sized(q.codes, {m.rows, m.cols}, codes, device);
  }
  if (transpose) {
    sized(q.codes_t, {m.cols, m.rows}, codes, device);
  } else {
    sized(q.codes_t, {0}, codes, device);
  }
  const BlockShape b = spec.block(m.rows, m.cols);
  const int64_t grid_rows = (m.rows + static_cast<int64_t>(b.rows) - 1) / static_cast<int64_t>(b.rows);
  const int64_t grid_cols = (m.cols + static_cast<int64_t>(b.cols) - 1) / static_cast<int64_t>(b.cols);
  for (Tensor* t : {&q.scale_inv, &q.amax}) {
    if (spec.granularity == Granularity::PerTensor) {
      sized(*t, {1}, DType::F32, device);
    } else {
      sized(*t, {grid_rows, grid_cols}, DType::F32, device);
    }
  }
  q.spec = spec;
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
    if (q.spec.granularity == Granularity::PerTensor) {
      q.scale_inv.data<float>()[0] = 1.0f;
      q.amax.data<float>()[0] = 0.0f;
    }
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
void quantize_tensor_cuda(const Tensor& x, Matrix m, const Tensor& scale, QTensor& q, bool amax_only,
                          cudaStream_t stream) {
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
  cuda::quantize_fp8(args, stream);
}

void quantize_blocks_cuda(const Tensor& x, Matrix m, QTensor& q, cudaStream_t stream) {
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
  cuda::quantize_blocks(args, stream);
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
  QTensor q;
  size_outputs(x, m, spec, transpose, q);
  if (device == Device::Cpu) {
    quantize_cpu(x, m, scale != nullptr ? &s : nullptr, q);
    return q;
  }
#if FP8KIT_HAVE_CUDA
  if (spec.granularity != Granularity::PerTensor) {
    quantize_blocks_cuda(x, m, q, nullptr);
  } else if (scale != nullptr) {
    quantize_tensor_cuda(x, m, *scale, q, false, nullptr);
  } else {
    // Current per-tensor scaling: an amax-only pass, the scale on the host as numerics computes it, the cast.
    quantize_tensor_cuda(x, m, scalar(1.0f, device), q, true, nullptr);
    const float amax = host_scalar(q.amax);
    const Tensor current = scalar(current_scale(amax, spec.format, spec.options), device);
    q.amax = Tensor({1}, DType::F32, device);  // raised again by the cast: the same value
    quantize_tensor_cuda(x, m, current, q, false, nullptr);
  }
  FP8KIT_CUDA_CHECK(cudaStreamSynchronize(nullptr));  // done on return, for whatever stream reads q next
#endif
  return q;
}

void quantize(Context& c, const Tensor& x, const QuantSpec& spec, QTensor& q, const Tensor* scale, bool transpose) {
  const Matrix m = check(x, spec, scale, transpose);
  FP8KIT_CHECK(x.device() == c.device(), "quantize: x is on {} and the context on {}: quantize where x is",
               name(x.device()), name(c.device()));
  FP8KIT_CHECK(scale == nullptr || (scale->dtype() == DType::F32 && scale->numel() == 1 && scale->device() == c.device()),
               "quantize: scale must be one f32 on {} (x's device)", name(c.device()));
  FP8KIT_CHECK(!c.is_cuda() || scale != nullptr || spec.granularity != Granularity::PerTensor,
               "quantize: current per-tensor scaling on the GPU reads its amax on the host, which a queued step "
               "cannot: pass a scale, or quantize per row, group or block");
  size_outputs(x, m, spec, transpose, q);
  if (!c.is_cuda()) {
    const float s = scale != nullptr ? scale->data<float>()[0] : 0.0f;
    FP8KIT_CHECK(scale == nullptr || (std::isfinite(s) && s > 0), "quantize: scale must be finite and > 0, got {}", s);
    quantize_cpu(x, m, scale != nullptr ? &s : nullptr, q);
    return;
  }
#if FP8KIT_HAVE_CUDA
  if (scale != nullptr) {
    // The per-tensor kernel raises the amax: it starts from 0.
    FP8KIT_CUDA_CHECK(cudaMemsetAsync(q.amax.device_data<float>(), 0, sizeof(float), stream(c)));
    quantize_tensor_cuda(x, m, *scale, q, false, stream(c));
  } else {
    quantize_blocks_cuda(x, m, q, stream(c));
  }
#endif
}

void transpose(Context& c, const QTensor& q, QTensor& t) {
  const Granularity g = q.spec.granularity;
  FP8KIT_CHECK((g == Granularity::PerTensor || g == Granularity::Block128x128) && q.codes.rank() == 2 &&
                   q.codes_t.numel() == q.codes.numel(),
               "transpose: the operand needs its transposed codes (quantize a matrix per tensor or in 128x128 blocks, "
               "with transpose)");
  FP8KIT_CHECK(q.codes.device() == c.device(), "transpose: the operand is on {} and the context on {}",
               name(q.codes.device()), name(c.device()));
  t.spec = q.spec;
  t.codes = q.codes_t.view(0, q.codes_t.shape());
  sized(t.codes_t, {0}, q.codes.dtype(), c.device());
  const int64_t grid_rows = g == Granularity::PerTensor ? 1 : q.scale_inv.dim(0);
  const int64_t grid_cols = g == Granularity::PerTensor ? 1 : q.scale_inv.dim(1);
  for (auto [from, to] : {std::pair{&q.scale_inv, &t.scale_inv}, std::pair{&q.amax, &t.amax}}) {
    if (g == Granularity::PerTensor) {
      sized(*to, {1}, DType::F32, c.device());
    } else {
      sized(*to, {grid_cols, grid_rows}, DType::F32, c.device());
    }
    if (!c.is_cuda()) {
      const float* in = from->data<float>();
      float* out = to->data<float>();
      for (int64_t r = 0; r < grid_rows; ++r)
        for (int64_t col = 0; col < grid_cols; ++col) out[col * grid_rows + r] = in[r * grid_cols + col];
      continue;
    }
#if FP8KIT_HAVE_CUDA
    if (grid_rows * grid_cols > 0)
      cuda::transpose_scales(from->device_data<float>(), grid_rows, grid_cols, to->device_data<float>(), stream(c));
#endif
  }
}

namespace {

// On c's stream, or with c null the default stream.
Tensor dequantize_on(const QTensor& q, [[maybe_unused]] Context* c) {
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
                          q.scale_inv.device_data<float>(), out.device_data<float>(),
                          c != nullptr ? stream(*c) : nullptr);
#endif
  return out;
}

}  // namespace

Tensor dequantize(const QTensor& q) {
  Tensor out = dequantize_on(q, nullptr);
#if FP8KIT_HAVE_CUDA
  if (out.device() == Device::Cuda) FP8KIT_CUDA_CHECK(cudaStreamSynchronize(nullptr));  // done on return
#endif
  return out;
}

Tensor dequantize(Context& c, const QTensor& q) {
  FP8KIT_CHECK(q.codes.device() == c.device(), "dequantize: the codes are on {} and the context on {}",
               name(q.codes.device()), name(c.device()));
  return dequantize_on(q, &c);
}

}  // namespace fp8kit::ops
