// ops::matmul's decode-sized products on the GPU (cuda::gemv, m <= 8) against the CPU's matmul of the
// same operands: bf16 (into bf16 or f32, with and without bias) and FP8 per tensor, per row and per
// tensor x per row, m = 1..8, odd n, k from 16 to 14336; that cuBLASLt is not used for them, that a
// captured graph replays them, and per tensor x per row at larger m (cuBLASLt's per-row mode).
#include "ops/matmul.h"
#include "ops/quantize.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "common/gradient_check.h"
#include "common/host_tensors.h"
#include "numerics/cast.h"
#include "ops/cuda/context.h"
#include "ops/cuda/gemv.h"
#include "ops/cuda/gpu_test.h"
#include "runtime/cuda/graph.h"

namespace fp8kit::ops {
namespace {

using testing::float_values;
using testing::host_tensor;

QTensor to_gpu(const QTensor& q) {
  QTensor g;
  g.codes = q.codes.to(Device::Cuda);
  g.scale_inv = q.scale_inv.to(Device::Cuda);
  g.spec = q.spec;
  return g;
}

// The values a product reads, as doubles: a bf16 or f32 tensor's elements, or an FP8 operand's codes
// decoded times their scale (per tensor or per row).
std::vector<double> operand_values(const Tensor& t) {
  const std::vector<float> v = float_values(t);
  return {v.begin(), v.end()};
}
std::vector<double> operand_values(const QTensor& q) {
  const int64_t rows = q.codes.dim(0), cols = q.codes.dim(1);
  const bool per_row = q.spec.granularity == Granularity::PerRow;
  std::vector<double> v(rows * cols);
  for (int64_t i = 0; i < rows * cols; ++i)
    v[i] = static_cast<double>(decode_fp8(q.codes.data<uint8_t>()[i], q.spec.format)) *
           q.scale_inv.data<float>()[per_row ? i / cols : 0];
  return v;
}

// sum_l |a[i, l] b[j, l]| per output: the scale of both devices' fp32 summation error.
std::vector<double> magnitudes(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t n,
                               int64_t k) {
  std::vector<double> out(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (int64_t l = 0; l < k; ++l) s += std::fabs(a[i * k + l] * b[j * k + l]);
      out[i * n + j] = s;
    }
  return out;
}

// Both devices add the same exact products in fp32, in different orders: each sum is within (k - 1) 2^-24
// of the terms' magnitude of the exact one, so the two within twice that; the scale product, the bias
// and f32 rounding a few ulps more; a bf16 y one bf16 step (2^-7 relative) where the two sums round
// to neighbouring values.
void expect_close(const Tensor& gpu, const Tensor& cpu, const std::vector<double>& magnitude, int64_t k,
                  const std::string& what) {
  const std::vector<float> got = float_values(gpu), want = float_values(cpu);
  ASSERT_EQ(got.size(), want.size()) << what;
  const double step = cpu.dtype() == DType::Bf16 ? 0x1p-7 : 0x1p-22;
  int failures = 0;
  for (size_t i = 0; i < got.size() && failures < 5; ++i) {
    const double tol = 2.0 * static_cast<double>(k + 2) * 0x1p-24 * magnitude[i] + step * std::fabs(want[i]) + 1e-30;
    if (!(std::fabs(static_cast<double>(got[i]) - want[i]) <= tol)) {
      ++failures;
      ADD_FAILURE() << what << " at " << i << ": gpu " << got[i] << ", cpu " << want[i] << ", tolerance " << tol;
    }
  }
}

struct Shape {
  int64_t m, n, k;
};

// n odd everywhere (no multiple of the 8 or 16 columns a block takes); one with more columns than the
// GPU holds blocks for at once (each warp takes several in turn).
std::vector<Shape> shapes() {
  std::vector<Shape> out;
  for (int64_t m = 1; m <= cuda::kGemvMaxRows; ++m) {
    out.push_back({m, 37, 16});
    out.push_back({m, 301, 48});
    out.push_back({m, 129, 4096 + 16});
    out.push_back({m, 13, 14336});
  }
  out.push_back({1, 1, 32});
  out.push_back({3, 40001, 64});
  out.push_back({1, 5, 131072 + 16});  // a's row past shared memory: tensor cores at m = 1 too
  return out;
}

std::string describe(const Shape& s) { return std::to_string(s.m) + "x" + std::to_string(s.n) + "x" + std::to_string(s.k); }

TEST(CudaGemv, Bf16ProductsMatchTheCpu) {
  FP8KIT_REQUIRE_GPU();
  Context c(Device::Cuda);
  for (const Shape& s : shapes()) {
    const Tensor a = host_tensor(testing::random_vector(s.m * s.k, 1, -2.0f, 2.0f), {s.m, s.k}, DType::Bf16);
    const Tensor b = host_tensor(testing::random_vector(s.n * s.k, 2), {s.n, s.k}, DType::Bf16);
    const Tensor ag = a.to(Device::Cuda), bg = b.to(Device::Cuda);
    const std::vector<double> magnitude = magnitudes(operand_values(a), operand_values(b), s.m, s.n, s.k);
    for (DType y_type : {DType::Bf16, DType::F32}) {
      for (const bool with_bias : {false, true}) {
        const Tensor bias = host_tensor(testing::random_vector(s.n, 3), {s.n}, y_type), bias_g = bias.to(Device::Cuda);
        Tensor want({s.m, s.n}, y_type), got({s.m, s.n}, y_type, Device::Cuda);
        matmul(a, b, want, {.bias = with_bias ? &bias : nullptr});
        matmul(c, ag, bg, got, {.bias = with_bias ? &bias_g : nullptr});
        c.synchronize();
        expect_close(got, want, magnitude, s.k,
                     describe(s) + " bf16 -> " + std::string(name(y_type)) + (with_bias ? " bias" : ""));
      }
    }
  }
  EXPECT_EQ(gemm(c).cached_plans(), 0u) << "a decode-sized product ran on cuBLASLt";
}

TEST(CudaGemv, Fp8ProductsAtEveryScalePairMatchTheCpu) {
  FP8KIT_REQUIRE_GPU();
  Context c(Device::Cuda);
  const QuantSpec tensor{}, row{.granularity = Granularity::PerRow};
  const std::pair<QuantSpec, QuantSpec> pairs[] = {{tensor, tensor}, {row, row}, {tensor, row}};
  for (const Shape& s : shapes()) {
    // Weight rows of different magnitudes, so that per-row scales differ.
    std::vector<float> wv = testing::random_vector(s.n * s.k, 5);
    for (int64_t i = 0; i < s.n * s.k; ++i) wv[i] *= std::pow(0.5f, static_cast<float>(i / s.k % 6));
    const Tensor x = host_tensor(testing::random_vector(s.m * s.k, 4, -3.0f, 3.0f), {s.m, s.k});
    const Tensor w = host_tensor(wv, {s.n, s.k});
    for (const auto& [sa, sb] : pairs) {
      const QTensor xq = quantize(x, sa), wq = quantize(w, sb);
      const QTensor xg = to_gpu(xq), wg = to_gpu(wq);
      const std::vector<double> magnitude = magnitudes(operand_values(xq), operand_values(wq), s.m, s.n, s.k);
      for (DType y_type : {DType::Bf16, DType::F32}) {
        Tensor want({s.m, s.n}, y_type), got({s.m, s.n}, y_type, Device::Cuda);
        matmul(xq, wq, want);
        matmul(c, xg, wg, got, {.fast_accumulation = true});  // gemv sums in fp32 regardless
        c.synchronize();
        expect_close(got, want, magnitude, s.k,
                     describe(s) + " e4m3 " + std::string(name(sa.granularity)) + " x " +
                         std::string(name(sb.granularity)) + " -> " + std::string(name(y_type)));
      }
    }
  }
  EXPECT_EQ(gemm(c).cached_plans(), 0u) << "a decode-sized product ran on cuBLASLt";
}

TEST(CudaGemv, Fp8MixedFormatsAndBiasMatchTheCpu) {
  FP8KIT_REQUIRE_GPU();
  Context c(Device::Cuda);
  const Shape s{5, 77, 1024};
  const Tensor x = host_tensor(testing::random_vector(s.m * s.k, 6, -3.0f, 3.0f), {s.m, s.k});
  const Tensor w = host_tensor(testing::random_vector(s.n * s.k, 7), {s.n, s.k});
  const Tensor bias = host_tensor(testing::random_vector(s.n, 8), {s.n}, DType::Bf16), bias_g = bias.to(Device::Cuda);
  for (const auto& [fa, fb] : {std::pair{Fp8Format::E4M3, Fp8Format::E5M2}, {Fp8Format::E5M2, Fp8Format::E4M3}}) {
    const QTensor xq = quantize(x, {.format = fa}), wq = quantize(w, {.format = fb, .granularity = Granularity::PerRow});
    Tensor want({s.m, s.n}, DType::F32), got({s.m, s.n}, DType::F32, Device::Cuda);
    matmul(xq, wq, want, {.bias = &bias});
    matmul(c, to_gpu(xq), to_gpu(wq), got, {.bias = &bias_g});
    c.synchronize();
    expect_close(got, want, magnitudes(operand_values(xq), operand_values(wq), s.m, s.n, s.k), s.k,
                 std::string(name(fa)) + " x " + std::string(name(fb)));
  }
  EXPECT_EQ(gemm(c).cached_plans(), 0u);
}

// Captured into a CUDA graph, the products replay with the eager bits (nothing allocated or synced).
TEST(CudaGemv, CapturedProductsReplayWithTheSameBits) {
  FP8KIT_REQUIRE_GPU();
  Context c(Device::Cuda);
  const Shape s{4, 333, 8192};
  const Tensor a = host_tensor(testing::random_vector(s.m * s.k, 9), {s.m, s.k}, DType::Bf16).to(Device::Cuda);
  const Tensor b = host_tensor(testing::random_vector(s.n * s.k, 10), {s.n, s.k}, DType::Bf16).to(Device::Cuda);
  const QTensor xq = to_gpu(quantize(host_tensor(testing::random_vector(s.m * s.k, 11), {s.m, s.k}), {}));
  const QTensor wq = to_gpu(
      quantize(host_tensor(testing::random_vector(s.n * s.k, 12), {s.n, s.k}), {.granularity = Granularity::PerRow}));
  Tensor eager_bf16({s.m, s.n}, DType::Bf16, Device::Cuda), eager_fp8({s.m, s.n}, DType::F32, Device::Cuda);
  Tensor replay_bf16({s.m, s.n}, DType::Bf16, Device::Cuda), replay_fp8({s.m, s.n}, DType::F32, Device::Cuda);
  matmul(c, a, b, eager_bf16);
  matmul(c, xq, wq, eager_fp8);
  const cuda::Graph graph = cuda::Graph::capture(stream(c), [&] {
    matmul(c, a, b, replay_bf16);
    matmul(c, xq, wq, replay_fp8);
  });
  graph.launch(stream(c));
  c.synchronize();
  EXPECT_EQ(float_values(replay_bf16), float_values(eager_bf16));
  EXPECT_EQ(float_values(replay_fp8), float_values(eager_fp8));
}

// Past gemv's rows, per tensor x per row runs on cuBLASLt (per-row scale mode, a's scale repeated):
// within cuBLASLt's FP8 tolerances (gemm_test.cpp: 3e-4 relative Frobenius error with the split
// accumulator, 3e-3 with a bf16 y), with and without a Context, k a multiple of 16 or not.
TEST(CudaGemv, PerTensorTimesPerRowPastGemvRowsRunsOnCublasLt) {
  FP8KIT_REQUIRE_GPU();
  Context c(Device::Cuda);
  for (const Shape& s : {Shape{9, 64, 256}, Shape{64, 200, 1024}, Shape{16, 33, 40}, Shape{3, 48, 40}}) {
    std::vector<float> wv = testing::random_vector(s.n * s.k, 14);
    for (int64_t i = 0; i < s.n * s.k; ++i) wv[i] *= std::pow(0.5f, static_cast<float>(i / s.k % 6));
    const QTensor xq = quantize(host_tensor(testing::random_vector(s.m * s.k, 13, -3.0f, 3.0f), {s.m, s.k}), {});
    const QTensor wq = quantize(host_tensor(wv, {s.n, s.k}), {.granularity = Granularity::PerRow});
    const QTensor xg = to_gpu(xq), wg = to_gpu(wq);
    for (DType y_type : {DType::F32, DType::Bf16}) {
      Tensor want({s.m, s.n}, y_type), on_context({s.m, s.n}, y_type, Device::Cuda),
          without({s.m, s.n}, y_type, Device::Cuda);
      matmul(xq, wq, want);
      matmul(c, xg, wg, on_context);
      c.synchronize();
      matmul(xg, wg, without);
      const std::vector<float> cpu = float_values(want);
      const std::vector<double> ref(cpu.begin(), cpu.end());
      const double bound = y_type == DType::Bf16 ? 3e-3 : 3e-4;
      EXPECT_LT(cuda::testing::relative_error(float_values(on_context), ref), bound) << describe(s) << " " << name(y_type);
      EXPECT_LT(cuda::testing::relative_error(float_values(without), ref), bound) << describe(s) << " " << name(y_type);
    }
  }
}

}  // namespace
}  // namespace fp8kit::ops
