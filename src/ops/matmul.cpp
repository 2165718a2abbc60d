// Tensor-level matmul: one set of shape, dtype and device checks, then the CPU GEMMs (OpenBLAS, exact
// FP8 emulation, scaled slice by slice for per-row and block scales) or, on the GPU, gemv for a few rows
// of a and cuBLASLt (a per-thread context without an ops::Context) for the rest.
#include "ops/matmul.h"

#include "base/error.h"
#include "numerics/cast.h"
#include "numerics/convert.h"
#include "ops/gemm.h"
#include "ops/quantize.h"

#include <fmt/ranges.h>

#include <algorithm>
#include <span>
#include <vector>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/context.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/gemm_scales.h"
#include "ops/cuda/gemv.h"
#endif

namespace fp8kit::ops {

namespace {

// The granularity pairs of FP8 matmuls (matmul.h): PerRow is row x row, TensorRow per tensor x per row.
enum class Scaling { PerTensor, PerRow, TensorRow, Block };

struct Operand {
  const Tensor& data;
  const Tensor* scale_inv = nullptr;  // FP8 only
  const QTensor* q = nullptr;         // FP8 only
};

void check_matrix(const Tensor& t, std::string_view what) {
  FP8KIT_CHECK(t.rank() == 2, "matmul: {} must be a matrix, got shape [{}]", what, fmt::join(t.shape(), ", "));
}

// Validates and returns m, n, k.
GemmShape check(const Operand& a, const Operand& b, const Tensor& y, const MatmulOptions& options) {
  check_matrix(a.data, "a");
  check_matrix(b.data, "b");
  check_matrix(y, "y");
  const int64_t m = a.data.dim(0), k = a.data.dim(1), n = b.data.dim(0);
  FP8KIT_CHECK(b.data.dim(1) == k, "matmul: a is [{}, {}] and b [{}, {}]: y = a . b^T needs the same k (columns)",
               m, k, n, b.data.dim(1));
  FP8KIT_CHECK(y.dim(0) == m && y.dim(1) == n, "matmul: y must be [{}, {}], got [{}]", m, n, fmt::join(y.shape(), ", "));
  const Device device = a.data.device();
  FP8KIT_CHECK(b.data.device() == device && y.device() == device &&
                   (options.bias == nullptr || options.bias->device() == device),
               "matmul: a is on {}, b on {}, y on {}: put every operand on one device (Tensor::to)", name(device),
               name(b.data.device()), name(y.device()));
  if (options.bias != nullptr) {
    const bool fp8 = a.scale_inv != nullptr;
    const DType want = fp8 ? DType::Bf16 : y.dtype();
    FP8KIT_CHECK(options.bias->numel() == n && options.bias->dtype() == want,
                 "matmul: bias must be [{}] {}, got [{}] {}", n, name(want), fmt::join(options.bias->shape(), ", "),
                 name(options.bias->dtype()));
  }
  FP8KIT_CHECK(options.activation == Activation::None || options.activation == Activation::Gelu,
               "matmul: the only activation a product applies is GELU");
  if (is_fp8(y.dtype()) || options.y_scale != nullptr) {
    FP8KIT_CHECK(a.scale_inv != nullptr && is_fp8(y.dtype()) && options.y_scale != nullptr,
                 "matmul: an FP8 y ({}) needs FP8 operands and options.y_scale, and y_scale an FP8 y",
                 name(y.dtype()));
    FP8KIT_CHECK(options.y_scale->numel() == 1 && options.y_scale->dtype() == DType::F32 &&
                     options.y_scale->device() == device,
                 "matmul: y_scale must be one f32 on {}, got [{}] {} on {}", name(device),
                 fmt::join(options.y_scale->shape(), ", "), name(options.y_scale->dtype()),
                 name(options.y_scale->device()));
  }
  return {m, n, k, false, true};
}

// t's elements as floats: f32 tensors as they are, bf16 ones widened into `widened` (grown, never
// shrunk: a decode step widens every weight, and a fresh buffer each time cost more in page faults and
// zeroing than the widening itself).
const float* float_values(const Tensor& t, std::vector<float>& widened) {
  if (t.dtype() == DType::F32) return t.data<float>();
  const auto n = static_cast<size_t>(t.numel());
  if (widened.size() < n) widened.resize(n);
  bf16_to_float(t.span<uint16_t>(), std::span<float>(widened.data(), n));
  return widened.data();
}

#if FP8KIT_HAVE_CUDA
// A 1x128 operand's scales [rows, groups] as cuBLASLt's Vec128 reads them, [groups, rows], into `out`.
void vec128_scales(const Tensor& scale_inv, float* out, cudaStream_t stream) {
  cuda::transpose_scales(scale_inv.device_data<float>(), scale_inv.dim(0), scale_inv.dim(1), out, stream);
}

// The GEMM's operands, y and epilogue (bias, GELU, y's scale, accumulation); scales are the caller's.
cuda::GemmArgs gemm_args(const Tensor& a, const Tensor& b, Tensor& y, const MatmulOptions& options, const GemmShape& s) {
  cuda::GemmArgs args;
  args.m = s.m;
  args.n = s.n;
  args.k = s.k;
  args.a = a.device_data<std::byte>();
  args.a_type = a.dtype();
  args.b = b.device_data<std::byte>();
  args.b_type = b.dtype();
  args.y = y.device_data<std::byte>();
  args.y_type = y.dtype();
  const bool gelu = options.activation == Activation::Gelu;
  if (options.bias != nullptr) {
    args.epilogue = gelu ? cuda::Epilogue::GeluBias : cuda::Epilogue::Bias;
    args.bias = options.bias->device_data<std::byte>();
  } else if (gelu) {
    args.epilogue = cuda::Epilogue::Gelu;
  }
  if (options.y_scale != nullptr) args.y_scale = options.y_scale->device_data<float>();
  args.fast_accumulation = options.fast_accumulation;
  args.constant_b = options.constant_b;
  return args;
}

// Where the GPU queues a product: with a Context, on its current lane with that lane's cuBLASLt context
// and scratch; without, on the legacy default stream with a per-thread cuBLASLt context, and the
// Vec128 scales (or a per-tensor scale broadcast to m floats) in tensors of their own. Decode-sized
// products (cuda::gemv_fits: m <= 8) run gemv, which reads the weight b once at memory speed.
void matmul_cuda(Context* c, const Operand& a, const Operand& b, Tensor& y, const MatmulOptions& options,
                 const GemmShape& s, Scaling scaling) {
  thread_local cuda::GemmContext own;  // one handle, workspace and plan cache per thread
  cuda::GemmContext& context = c != nullptr ? gemm(*c) : own;
  const cudaStream_t queue = c != nullptr ? stream(*c) : nullptr;
  cuda::GemmArgs args = gemm_args(a.data, b.data, y, options, s);
  Tensor a_scales, b_scales;  // Vec128 layouts of 1x128 scales or a's broadcast scale, without a context
  if (a.scale_inv != nullptr) {
    args.a_scale_inv = a.scale_inv->device_data<float>();
    args.b_scale_inv = b.scale_inv->device_data<float>();
  }
  if (scaling == Scaling::PerRow) args.a_scale_mode = args.b_scale_mode = cuda::ScaleMode::OuterVec;
  if (scaling == Scaling::TensorRow) args.b_scale_mode = cuda::ScaleMode::OuterVec;
  if (scaling != Scaling::Block && cuda::gemv_fits(args)) return cuda::gemv(args, queue);  // (blocks: cuBLASLt)
  if (scaling == Scaling::TensorRow) {
    // cuBLASLt scales per row x per row: a's one scale repeated m times.
    float* room = nullptr;
    if (c != nullptr) {
      room = static_cast<float*>(c->scratch(static_cast<size_t>(s.m) * sizeof(float)));
    } else {
      a_scales = Tensor({s.m}, DType::F32, y.device());
      room = a_scales.device_data<float>();
    }
    cuda::broadcast_scale(args.a_scale_inv, s.m, room, queue);
    args.a_scale_inv = room;
    args.a_scale_mode = cuda::ScaleMode::OuterVec;
  }
  if (scaling == Scaling::Block) {
    const bool b_block = b.q->spec.granularity == Granularity::Block128x128;
    // 256-byte aligned pieces (cuBLASLt wants vector scales 16-byte aligned).
    const size_t a_bytes = (static_cast<size_t>(a.scale_inv->numel()) * sizeof(float) + 255) / 256 * 256;
    const size_t b_bytes = b_block ? 0 : static_cast<size_t>(b.scale_inv->numel()) * sizeof(float);
    float* a_room = nullptr;
    float* b_room = nullptr;
    if (c != nullptr) {
      auto* room = static_cast<std::byte*>(c->scratch(a_bytes + b_bytes));
      a_room = reinterpret_cast<float*>(room);
      b_room = reinterpret_cast<float*>(room + a_bytes);
    } else {
      a_scales = Tensor({a.scale_inv->dim(1), a.scale_inv->dim(0)}, DType::F32, y.device());
      a_room = a_scales.device_data<float>();
      if (!b_block) {
        b_scales = Tensor({b.scale_inv->dim(1), b.scale_inv->dim(0)}, DType::F32, y.device());
        b_room = b_scales.device_data<float>();
      }
    }
    vec128_scales(*a.scale_inv, a_room, queue);
    args.a_scale_inv = a_room;
    args.a_scale_mode = cuda::ScaleMode::Vec128;
    if (b_block) {
      args.b_scale_mode = cuda::ScaleMode::Block128;
    } else {
      vec128_scales(*b.scale_inv, b_room, queue);
      args.b_scale_inv = b_room;
      args.b_scale_mode = cuda::ScaleMode::Vec128;
    }
  }
  context.gemm(args, queue);
  // a_scales and b_scales are freed on return, with the GEMM maybe still queued: cudaFree waits for it.
}
#endif

// y's fp32 accumulator = sum over k slices of (A_s . B_s^T) * (sa * sb) (matmul.h), from the codes.
void gemm_scaled_cpu(const QTensor& a, const QTensor& b, Scaling scaling, const GemmShape& s, float* acc) {
  std::fill(acc, acc + s.m * s.n, 0.0f);
  if (s.m == 0 || s.n == 0) return;
  const int64_t width = scaling == Scaling::Block ? 128 : std::max<int64_t>(s.k, 1);
  const float* a_values = fp8_values(fp8_format(a.codes.dtype())).data();
  const float* b_values = fp8_values(fp8_format(b.codes.dtype())).data();
  const uint8_t* a_codes = a.codes.data<uint8_t>();
  const uint8_t* b_codes = b.codes.data<uint8_t>();
  const float* sa = a.scale_inv.data<float>();
  const float* sb = b.scale_inv.data<float>();
  const BlockShape ba = a.block(), bb = b.block();
  const int64_t a_grid_cols = a.scale_inv.numel() / ((s.m + ba.rows - 1) / ba.rows);
  const int64_t b_grid_cols = b.scale_inv.numel() / ((s.n + bb.rows - 1) / bb.rows);
  std::vector<float> a_slice(s.m * width), b_slice(s.n * width), partial(s.m * s.n);
  for (int64_t k0 = 0; k0 < s.k; k0 += width) {
    const int64_t w = std::min(width, s.k - k0);
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t t = 0; t < w; ++t) a_slice[i * w + t] = a_values[a_codes[i * s.k + k0 + t]];
    for (int64_t j = 0; j < s.n; ++j)
      for (int64_t t = 0; t < w; ++t) b_slice[j * w + t] = b_values[b_codes[j * s.k + k0 + t]];
    gemm_f32({s.m, s.n, w, false, true}, 1.0f, a_slice.data(), b_slice.data(), 0.0f, partial.data());
    const int64_t a_col = k0 / static_cast<int64_t>(ba.cols), b_col = k0 / static_cast<int64_t>(bb.cols);
    for (int64_t i = 0; i < s.m; ++i) {
      const float a_scale = sa[i / static_cast<int64_t>(ba.rows) * a_grid_cols + a_col];
      for (int64_t j = 0; j < s.n; ++j) {
        const float scale = a_scale * sb[j / static_cast<int64_t>(bb.rows) * b_grid_cols + b_col];
        acc[i * s.n + j] += partial[i * s.n + j] * scale;
      }
    }
  }
}

// A context, when given, must be on the operands' device.
void check_context(const Context* c, Device operands) {
  FP8KIT_CHECK(c == nullptr || c->device() == operands,
               "matmul: the operands are on {} and the context on {}: multiply where the operands are", name(operands),
               name(c->device()));
}

// c: the context to queue on (null: matmul()'s without one).
void run(Context* c, const Operand& a, const Operand& b, Tensor& y, const MatmulOptions& options, const GemmShape& s,
         Scaling scaling = Scaling::PerTensor) {
  check_context(c, a.data.device());
  if (a.data.device() == Device::Cuda) {
#if FP8KIT_HAVE_CUDA
    matmul_cuda(c, a, b, y, options, s, scaling);
#endif
    return;
  }
  // fp32 accumulation straight into an f32 y, else into a scratch that is rounded to y's type at the end.
  // The scratch buffers are the thread's, as gemm_fp8's (grown to the largest product, then reused).
  thread_local std::vector<float> scratch, a_widened, b_widened, bias_widened;
  const auto outputs = static_cast<size_t>(s.m * s.n);
  if (y.dtype() != DType::F32 && scratch.size() < outputs) scratch.resize(outputs);
  float* acc = y.dtype() == DType::F32 ? y.data<float>() : scratch.data();
  if (scaling != Scaling::PerTensor) {
    gemm_scaled_cpu(*a.q, *b.q, scaling, s, acc);
  } else if (a.scale_inv != nullptr) {
    const Fp8Operand fa{a.data.data<uint8_t>(), fp8_format(a.data.dtype()), a.scale_inv->data<float>()[0]};
    const Fp8Operand fb{b.data.data<uint8_t>(), fp8_format(b.data.dtype()), b.scale_inv->data<float>()[0]};
    gemm_fp8(s, fa, fb, 0.0f, acc);
  } else {
    gemm_f32(s, 1.0f, float_values(a.data, a_widened), float_values(b.data, b_widened), 0.0f, acc);
  }
  // The bias in fp32 before y's rounding, as the GPU epilogue adds it.
  if (options.bias != nullptr) {
    const float* bias = float_values(*options.bias, bias_widened);
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) acc[i * s.n + j] += bias[j];
  }
  if (options.activation == Activation::Gelu)
    for (int64_t i = 0; i < s.m * s.n; ++i) acc[i] = gelu(acc[i]);
  if (y.dtype() == DType::Bf16) float_to_bf16(std::span<const float>(acc, outputs), y.span<uint16_t>());
  if (is_fp8(y.dtype())) {
    const float scale = options.y_scale->data<float>()[0];
    const Fp8Format format = fp8_format(y.dtype());
    uint8_t* codes = y.data<uint8_t>();
    for (int64_t i = 0; i < s.m * s.n; ++i) codes[i] = encode_fp8(acc[i] * scale, format);
  }
}

// The checks of a Tensor product.
void matmul_tensors(Context* c, const Tensor& a, const Tensor& b, Tensor& y, const MatmulOptions& options) {
  const Operand oa{a, nullptr}, ob{b, nullptr};
  const GemmShape s = check(oa, ob, y, options);
  const bool f32 = a.dtype() == DType::F32 && b.dtype() == DType::F32 && y.dtype() == DType::F32;
  const bool bf16 = a.dtype() == DType::Bf16 && b.dtype() == DType::Bf16 &&
                    (y.dtype() == DType::Bf16 || y.dtype() == DType::F32);
  FP8KIT_CHECK(f32 || bf16, "matmul: {} x {} -> {} is not supported: use f32 x f32 -> f32 or bf16 x bf16 -> bf16/f32",
               name(a.dtype()), name(b.dtype()), name(y.dtype()));
  run(c, oa, ob, y, options, s);
}

// The checks of an FP8 product and its scaling pair.
void matmul_quantized(Context* c, const QTensor& a, const QTensor& b, Tensor& y, const MatmulOptions& options) {
  const Operand oa{a.codes, &a.scale_inv, &a}, ob{b.codes, &b.scale_inv, &b};
  const GemmShape s = check(oa, ob, y, options);
  FP8KIT_CHECK(is_fp8(a.codes.dtype()) && is_fp8(b.codes.dtype()), "matmul: FP8 operands must hold e4m3 or e5m2 codes, got {} and {}",
               name(a.codes.dtype()), name(b.codes.dtype()));
  FP8KIT_CHECK(!(a.codes.dtype() == DType::E5M2 && b.codes.dtype() == DType::E5M2),
               "matmul: e5m2 x e5m2 has no FP8 tensor-core GEMM: quantize one operand to e4m3");
  FP8KIT_CHECK(y.dtype() == DType::Bf16 || y.dtype() == DType::F32 || is_fp8(y.dtype()),
               "matmul: FP8 products give bf16, f32, e4m3 or e5m2, not {}", name(y.dtype()));
  const auto is_1x128 = [](const QuantSpec& q) {
    return q.granularity == Granularity::Block1x128 || (q.granularity == Granularity::PerGroup && q.group == 128);
  };
  const Granularity ga = a.spec.granularity, gb = b.spec.granularity;
  Scaling scaling = Scaling::PerTensor;
  if (ga == Granularity::PerRow && gb == Granularity::PerRow) {
    scaling = Scaling::PerRow;
  } else if (ga == Granularity::PerTensor && gb == Granularity::PerRow) {
    scaling = Scaling::TensorRow;
  } else if (is_1x128(a.spec) && (gb == Granularity::Block128x128 || is_1x128(b.spec))) {
    scaling = Scaling::Block;
  } else {
    FP8KIT_CHECK(ga == Granularity::PerTensor && gb == Granularity::PerTensor,
                 "matmul: a has {} scales and b {}: multiply per tensor x per tensor, row x row, tensor x row, or "
                 "1x128 x 128x128 / 1x128 (quantize the operands so)",
                 name(ga), name(gb));
  }
  FP8KIT_CHECK(scaling == Scaling::PerTensor || (options.activation == Activation::None && !is_fp8(y.dtype())),
               "matmul: GELU and an FP8 y need per-tensor operand scales, not {} x {}", name(ga), name(gb));
  FP8KIT_CHECK(scaling != Scaling::Block || !options.fast_accumulation,
               "matmul: block-scaled FP8 products run the split accumulator; set fast_accumulation = false");
  for (const QTensor* q : {&a, &b}) {
    const BlockShape block = q->block();
    const int64_t rows = q->rows(), cols = q->cols();
    const int64_t want = q->spec.granularity == Granularity::PerTensor
                             ? 1
                             : (rows + static_cast<int64_t>(block.rows) - 1) / static_cast<int64_t>(block.rows) *
                                   ((cols + static_cast<int64_t>(block.cols) - 1) / static_cast<int64_t>(block.cols));
    FP8KIT_CHECK(q->scale_inv.numel() == want && q->scale_inv.dtype() == DType::F32 &&
                     q->scale_inv.device() == a.codes.device(),
                 "matmul: a [{}, {}] operand with {} scales needs {} f32 scale_inv on its device, got {} {} on {}", rows,
                 cols, name(q->spec.granularity), want, q->scale_inv.numel(), name(q->scale_inv.dtype()),
                 name(q->scale_inv.device()));
  }
  run(c, oa, ob, y, options, s, scaling);
}

}  // namespace

void matmul(const Tensor& a, const Tensor& b, Tensor& y, const MatmulOptions& options) {
  matmul_tensors(nullptr, a, b, y, options);
}

void matmul(const QTensor& a, const QTensor& b, Tensor& y, const MatmulOptions& options) {
  matmul_quantized(nullptr, a, b, y, options);
}

void matmul(Context& c, const Tensor& a, const Tensor& b, Tensor& y, const MatmulOptions& options) {
  matmul_tensors(&c, a, b, y, options);
}

void matmul(Context& c, const QTensor& a, const QTensor& b, Tensor& y, const MatmulOptions& options) {
  matmul_quantized(&c, a, b, y, options);
}

void matmul(Context& c, const Tensor& a, const Tensor& a_scale, const QTensor& b, Tensor& y, const MatmulOptions& options) {
  FP8KIT_CHECK(a.dtype() == DType::Bf16, "matmul: a quantized in the product must be bf16, got {}", name(a.dtype()));
  FP8KIT_CHECK(b.codes.dtype() == DType::E4M3 && b.spec.granularity == Granularity::PerTensor,
               "matmul: with a quantized in the product, b must be E4M3 per tensor, got {} {}", name(b.codes.dtype()),
               name(b.spec.granularity));
  FP8KIT_CHECK(a_scale.numel() == 1 && a_scale.dtype() == DType::F32 && a_scale.device() == a.device(),
               "matmul: a_scale must be one f32 on {}, got [{}] {} on {}", name(a.device()),
               fmt::join(a_scale.shape(), ", "), name(a_scale.dtype()), name(a_scale.device()));
#if FP8KIT_HAVE_CUDA
  if (a.device() == Device::Cuda) {
    // a_scale marks a as FP8 for the checks (a bf16 bias, an FP8 y allowed).
    const GemmShape s = check(Operand{a, &a_scale}, Operand{b.codes, &b.scale_inv, &b}, y, options);
    check_context(&c, Device::Cuda);
    FP8KIT_CHECK(b.scale_inv.numel() == 1 && b.scale_inv.device() == Device::Cuda,
                 "matmul: b's per-tensor scale_inv must be one float on cuda");
    cuda::GemmArgs args = gemm_args(a, b.codes, y, options, s);
    args.a_scale = a_scale.device_data<float>();
    args.b_scale_inv = b.scale_inv.device_data<float>();
    gemm(c).gemm(args, stream(c));
    return;
  }
#endif
  matmul(c, quantize(a, {.format = Fp8Format::E4M3}, &a_scale), b, y, options);
}

}  // namespace fp8kit::ops
