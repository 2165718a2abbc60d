// Tensor-level matmul: one set of shape, dtype and device checks, then the CPU GEMMs (OpenBLAS, exact
// FP8 emulation) or a per-thread cuBLASLt context.
#include "ops/matmul.h"

#include "base/error.h"
#include "numerics/convert.h"
#include "ops/gemm.h"

#include <fmt/ranges.h>

#include <vector>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/gemm.h"
#endif

namespace fp8kit::ops {

namespace {

struct Operand {
  const Tensor& data;
  const Tensor* scale_inv;  // FP8 only
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
  return {m, n, k, false, true};
}

// t's elements as floats: f32 tensors as they are, bf16 ones widened into `widened`.
const float* float_values(const Tensor& t, std::vector<float>& widened) {
  if (t.dtype() == DType::F32) return t.data<float>();
  widened.resize(t.numel());
  bf16_to_float(t.span<uint16_t>(), widened);
  return widened.data();
}

#if FP8KIT_HAVE_CUDA
void matmul_cuda(const Operand& a, const Operand& b, Tensor& y, const MatmulOptions& options, const GemmShape& s) {
  thread_local cuda::GemmContext context;  // one handle, workspace and plan cache per thread
  cuda::GemmArgs args;
  args.m = s.m;
  args.n = s.n;
  args.k = s.k;
  args.a = a.data.device_data<std::byte>();
  args.a_type = a.data.dtype();
  args.b = b.data.device_data<std::byte>();
  args.b_type = b.data.dtype();
  args.y = y.device_data<std::byte>();
  args.y_type = y.dtype();
  if (a.scale_inv != nullptr) {
    args.a_scale_inv = a.scale_inv->device_data<float>();
    args.b_scale_inv = b.scale_inv->device_data<float>();
  }
  if (options.bias != nullptr) {
    args.epilogue = cuda::Epilogue::Bias;
    args.bias = options.bias->device_data<std::byte>();
  }
  args.fast_accumulation = options.fast_accumulation;
  context.gemm(args);
}
#endif

void run(const Operand& a, const Operand& b, Tensor& y, const MatmulOptions& options, const GemmShape& s) {
  if (a.data.device() == Device::Cuda) {
#if FP8KIT_HAVE_CUDA
    matmul_cuda(a, b, y, options, s);
#endif
    return;
  }
  // fp32 accumulation straight into an f32 y, else into a scratch that is rounded to bf16 at the end.
  std::vector<float> scratch, a_widened, b_widened, bias_widened;
  if (y.dtype() != DType::F32) scratch.resize(s.m * s.n);
  float* acc = y.dtype() == DType::F32 ? y.data<float>() : scratch.data();
  if (a.scale_inv != nullptr) {
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
  if (y.dtype() != DType::F32) float_to_bf16(scratch, y.span<uint16_t>());
}

}  // namespace

void matmul(const Tensor& a, const Tensor& b, Tensor& y, const MatmulOptions& options) {
  const Operand oa{a, nullptr}, ob{b, nullptr};
  const GemmShape s = check(oa, ob, y, options);
  const bool f32 = a.dtype() == DType::F32 && b.dtype() == DType::F32 && y.dtype() == DType::F32;
  const bool bf16 = a.dtype() == DType::Bf16 && b.dtype() == DType::Bf16 &&
                    (y.dtype() == DType::Bf16 || y.dtype() == DType::F32);
  FP8KIT_CHECK(f32 || bf16, "matmul: {} x {} -> {} is not supported: use f32 x f32 -> f32 or bf16 x bf16 -> bf16/f32",
               name(a.dtype()), name(b.dtype()), name(y.dtype()));
  run(oa, ob, y, options, s);
}

void matmul(const Fp8Tensor& a, const Fp8Tensor& b, Tensor& y, const MatmulOptions& options) {
  const Operand oa{a.data, &a.scale_inv}, ob{b.data, &b.scale_inv};
  const GemmShape s = check(oa, ob, y, options);
  FP8KIT_CHECK(is_fp8(a.data.dtype()) && is_fp8(b.data.dtype()), "matmul: FP8 operands must hold e4m3 or e5m2 codes, got {} and {}",
               name(a.data.dtype()), name(b.data.dtype()));
  FP8KIT_CHECK(!(a.data.dtype() == DType::E5M2 && b.data.dtype() == DType::E5M2),
               "matmul: e5m2 x e5m2 has no FP8 tensor-core GEMM: quantize one operand to e4m3");
  FP8KIT_CHECK(y.dtype() == DType::Bf16 || y.dtype() == DType::F32, "matmul: FP8 products give bf16 or f32, not {}",
               name(y.dtype()));
  for (const Tensor* t : {&a.scale_inv, &b.scale_inv})
    FP8KIT_CHECK(t->numel() == 1 && t->dtype() == DType::F32 && t->device() == a.data.device(),
                 "matmul: an FP8 operand's scale_inv must be one f32 on its device");
  run(oa, ob, y, options, s);
}

}  // namespace fp8kit::ops
