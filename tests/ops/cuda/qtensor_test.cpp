// QTensor ops on the GPU against the CPU, one table of op x granularity x shape: ops::quantize gives
// the same bytes (codes, transposed codes, scale_inv, amax) at every granularity, input type and format;
// ops::matmul of the (bit-identical) quantized operands agrees with the exact CPU product within the
// accumulation tolerance stated below, for every granularity pair the GPU runs.
#include "ops/matmul.h"
#include "ops/quantize.h"

#include "base/error.h"
#include "common/host_tensors.h"
#include "numerics/cast.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/gemm_scales.h"
#include "ops/cuda/gpu_test.h"
#include "runtime/cuda/check.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

namespace fp8kit::ops {
namespace {

using cuda::testing::awkward_floats;
using cuda::testing::random_normal;
using testing::float_values;
using testing::host_tensor;

struct Granular {
  const char* name;
  QuantSpec spec;
  bool transpose;
};
const Granular kGranularities[] = {
    {"tensor", {.granularity = Granularity::PerTensor}, true},
    {"row", {.granularity = Granularity::PerRow}, false},
    {"1x32", {.granularity = Granularity::PerGroup, .group = 32}, false},
    {"1x64", {.granularity = Granularity::PerGroup, .group = 64}, false},
    {"1x128", {.granularity = Granularity::Block1x128}, false},
    {"128x128", {.granularity = Granularity::Block128x128}, true},
    {"128x128 margin 1, pow2", {.granularity = Granularity::Block128x128, .options = {.margin = 1, .power_of_two = true}}, false},
};

struct Shape {
  int64_t rows, cols;
};
// One row; partial groups and blocks, with 16-byte loads of either type (cols a multiple of 8) or
// bf16's scalar loads (300: a multiple of 4, not 8) or both types' (257, 33); long rows beyond the
// 8192 columns a row block keeps in registers, loaded whole (8200) or not (9001); a bandwidth-sized
// tile.
const Shape kQuantizeShapes[] = {{1, 16},  {1, 300},  {5, 160},    {217, 300}, {200, 264},
                                 {130, 257}, {64, 33}, {3, 9001}, {2, 8200},  {256, 4096}};

void expect_same_bytes(const Tensor& cpu, const Tensor& gpu, const std::string& what) {
  const Tensor back = gpu.to(Device::Cpu);
  ASSERT_EQ(back.shape(), cpu.shape()) << what;
  EXPECT_EQ(std::memcmp(back.device_data<std::byte>(), cpu.device_data<std::byte>(), cpu.nbytes()), 0) << what;
}

TEST(QTensorOnBothBackends, QuantizeIsBitIdenticalAtEveryGranularity) {
  FP8KIT_REQUIRE_GPU();
  uint32_t seed = 1;
  for (const Shape& s : kQuantizeShapes) {
    for (const Granular& g : kGranularities) {
      for (DType x_type : {DType::F32, DType::Bf16}) {
        for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
          QuantSpec spec = g.spec;
          spec.format = format;
          const Tensor x = host_tensor(awkward_floats(s.rows * s.cols, seed++), {s.rows, s.cols}, x_type);
          const QTensor c = quantize(x, spec, nullptr, g.transpose);
          const QTensor d = quantize(x.to(Device::Cuda), spec, nullptr, g.transpose);
          const std::string what =
              fmt::format("{}x{} {} {} {}", s.rows, s.cols, g.name, name(x_type), name(format));
          expect_same_bytes(c.codes, d.codes, what + " codes");
          expect_same_bytes(c.codes_t, d.codes_t, what + " transposed codes");
          expect_same_bytes(c.scale_inv, d.scale_inv, what + " scale_inv");
          expect_same_bytes(c.amax, d.amax, what + " amax");
          // NaN codes dequantize to NaN on both, without the CPU's sign on the GPU (ops/cuda/convert.h).
          const std::vector<float> dc = float_values(dequantize(c)), dg = float_values(dequantize(d));
          for (size_t i = 0; i < dc.size(); ++i) {
            if (std::isnan(dc[i])) {
              ASSERT_TRUE(std::isnan(dg[i])) << what << " at " << i;
            } else {
              ASSERT_EQ(dg[i], dc[i]) << what << " at " << i;
            }
          }
        }
      }
    }
  }
}

struct Product {
  const char* name;
  QuantSpec a, b;
};
const Product kProducts[] = {
    {"tensor x tensor", {}, {}},
    {"row x row", {.granularity = Granularity::PerRow}, {.granularity = Granularity::PerRow}},
    {"1x128 x 128x128", {.granularity = Granularity::Block1x128}, {.granularity = Granularity::Block128x128}},
    {"1x128 x 1x128", {.granularity = Granularity::PerGroup, .group = 128}, {.granularity = Granularity::Block1x128}},
};
struct GemmShape3 {
  int64_t m, n, k;
};
// Aligned; k and n off cuBLASLt's multiples of 16 (the padded path); partial 128-blocks in every
// dimension; one row; partial tiles and 128-blocks that the own block kernel (block_gemm.h) takes.
const GemmShape3 kGemmShapes[] = {{64, 48, 256},   {217, 300, 300},  {130, 140, 384},
                                  {1, 256, 512},   {256, 512, 1024}, {132, 400, 304}};

TEST(QTensorOnBothBackends, MatmulAgreesWithTheExactCpuProduct) {
  FP8KIT_REQUIRE_GPU();
  for (const GemmShape3& s : kGemmShapes) {
    // Rows of x and w at different magnitudes, so that per-row and per-block scales differ.
    std::vector<float> xv = random_normal(s.m * s.k, 1), wv = random_normal(s.n * s.k, 2);
    for (int64_t i = 0; i < s.m * s.k; ++i) xv[i] *= std::ldexp(1.0f, static_cast<int>(i / s.k % 4 + i % s.k / 128));
    for (int64_t i = 0; i < s.n * s.k; ++i) wv[i] *= std::ldexp(1.0f, -static_cast<int>(i / s.k % 5));
    const Tensor x = host_tensor(xv, {s.m, s.k}), w = host_tensor(wv, {s.n, s.k});
    for (const Product& p : kProducts) {
      for (DType y_type : {DType::F32, DType::Bf16}) {
        const QTensor xc = quantize(x, p.a), wc = quantize(w, p.b);
        const QTensor xg = quantize(x.to(Device::Cuda), p.a), wg = quantize(w.to(Device::Cuda), p.b);
        Tensor yc({s.m, s.n}, y_type), yg({s.m, s.n}, y_type, Device::Cuda);
        matmul(xc, wc, yc);
        matmul(xg, wg, yg);
        const std::vector<float> c = float_values(yc), g = float_values(yg);
        // sum_l |term| per output, from the CPU's operands (the GPU's are the same bytes).
        const Tensor xd = dequantize(xc), wd = dequantize(wc);
        const std::vector<float> xa = float_values(xd), wa = float_values(wd);
        for (int64_t i = 0; i < s.m; ++i) {
          for (int64_t j = 0; j < s.n; ++j) {
            double magnitude = 0.0;
            for (int64_t l = 0; l < s.k; ++l) magnitude += std::fabs(static_cast<double>(xa[i * s.k + l]) * wa[j * s.k + l]);
            // Both sides sum the same exact FP8 products in fp32 but in different orders, and Hopper's
            // FP8 tensor cores keep about 14 mantissa bits in the accumulator between the split
            // accumulator's fp32 promotions (every 128 of k; DeepSeek-V3's measurement of the
            // "limited accumulation precision"): each side is within ~2^-13 of the magnitude of the exact
            // sum, so 2^-12 bounds their difference. bf16 outputs may round to neighbouring values: one
            // bf16 ulp more (2^-7 of |y|).
            const double tol = (y_type == DType::Bf16 ? 0x1p-7 : 0.0) * std::fabs(c[i * s.n + j]) + 0x1p-12 * magnitude;
            ASSERT_NEAR(g[i * s.n + j], c[i * s.n + j], tol)
                << s.m << "x" << s.n << "x" << s.k << " " << p.name << " -> " << name(y_type) << " at " << i << "," << j;
          }
        }
      }
    }
  }
}

// At a shape cuBLASLt's rules all fit, the per-row and block-scaled GEMMs run on its scale modes
// (OUTER_VEC_32F, VEC128_32F x BLK128x128_32F) on this GPU, not on GemmContext's fallbacks.
TEST(QTensorOnBothBackends, AlignedScaledGemmsRunOnCublasLtScaleModes) {
  FP8KIT_REQUIRE_GPU();
  const int64_t m = 256, n = 512, k = 1024;
  const Tensor x = host_tensor(random_normal(m * k, 4), {m, k}).to(Device::Cuda);
  const Tensor w = host_tensor(random_normal(n * k, 5), {n, k}).to(Device::Cuda);
  cuda::GemmContext context({.block_kernel = false});
  Tensor y({m, n}, DType::Bf16, Device::Cuda);
  cuda::GemmArgs args;
  args.m = m, args.n = n, args.k = k;
  args.a_type = args.b_type = DType::E4M3;
  args.y = y.device_data<std::byte>(), args.y_type = DType::Bf16;
  const QTensor xr = quantize(x, {.granularity = Granularity::PerRow}), wr = quantize(w, {.granularity = Granularity::PerRow});
  args.a = xr.codes.device_data<std::byte>(), args.b = wr.codes.device_data<std::byte>();
  args.a_scale_inv = xr.scale_inv.device_data<float>(), args.b_scale_inv = wr.scale_inv.device_data<float>();
  args.a_scale_mode = args.b_scale_mode = cuda::ScaleMode::OuterVec;
  context.gemm(args);
  EXPECT_EQ(context.fallback_gemms(), 0u) << "cuBLASLt refused OUTER_VEC_32F scales";
  const QTensor xb = quantize(x, {.granularity = Granularity::Block1x128});
  const QTensor wb = quantize(w, {.granularity = Granularity::Block128x128});
  Tensor x_scales({k / 128, m}, DType::F32, Device::Cuda);  // Vec128's layout
  cuda::transpose_scales(xb.scale_inv.device_data<float>(), m, k / 128, x_scales.device_data<float>());
  args.a = xb.codes.device_data<std::byte>(), args.b = wb.codes.device_data<std::byte>();
  args.a_scale_inv = x_scales.device_data<float>(), args.b_scale_inv = wb.scale_inv.device_data<float>();
  args.a_scale_mode = cuda::ScaleMode::Vec128, args.b_scale_mode = cuda::ScaleMode::Block128;
  context.gemm(args);
  EXPECT_EQ(context.fallback_gemms(), 0u) << "cuBLASLt refused VEC128_32F x BLK128x128_32F scales";
  EXPECT_EQ(context.block_kernel_gemms(), 0u);
  FP8KIT_CUDA_CHECK(cudaDeviceSynchronize());
}

// The own block-scaled kernel (block_gemm.h) against cuBLASLt's scale modes, for what the Linear's
// three GEMMs ask of it: E4M3 x E4M3 (fprop), E5M2 x E4M3 (dgrad, wgrad), E4M3 x E5M2; y f32 or bf16;
// a bias; accumulating into y. Partial tiles in m and n, a partial 128-block in k. Both sum the same
// exact products of each 128-wide slice of k in fp32 and scale each slice once, in different orders:
// 2^-12 of sum |term| bounds them (the exact-product test above), plus a bf16 ulp of y.
TEST(QTensorOnBothBackends, OwnBlockKernelAgreesWithCublasLt) {
  FP8KIT_REQUIRE_GPU();
  const int64_t m = 260, n = 656, k = 1040;  // 6 x 3 tiles of 128 rows x 256 columns: the last pair's partner past n
  std::vector<float> xv = random_normal(m * k, 6), wv = random_normal(n * k, 7), bv = random_normal(n, 8);
  for (int64_t i = 0; i < m * k; ++i) xv[i] *= std::ldexp(1.0f, static_cast<int>(i / k % 3 + i % k / 128 % 4));
  for (int64_t i = 0; i < n * k; ++i) wv[i] *= std::ldexp(1.0f, -static_cast<int>(i / k / 128 % 3));
  const Tensor x = host_tensor(xv, {m, k}).to(Device::Cuda), w = host_tensor(wv, {n, k}).to(Device::Cuda);
  const Tensor bias = host_tensor(bv, {n}, DType::Bf16).to(Device::Cuda);
  const std::pair<Fp8Format, Fp8Format> formats[] = {
      {Fp8Format::E4M3, Fp8Format::E4M3}, {Fp8Format::E5M2, Fp8Format::E4M3}, {Fp8Format::E4M3, Fp8Format::E5M2}};
  for (const auto& [fa, fb] : formats) {
    const QTensor xb = quantize(x, {.format = fa, .granularity = Granularity::Block1x128});
    const QTensor wb = quantize(w, {.format = fb, .granularity = Granularity::Block128x128});
    Tensor x_scales({(k + 127) / 128, m}, DType::F32, Device::Cuda);  // Vec128's layout
    cuda::transpose_scales(xb.scale_inv.device_data<float>(), m, (k + 127) / 128, x_scales.device_data<float>());
    // sum_l |term| per output, from the dequantized operands.
    const std::vector<float> xa = float_values(dequantize(xb)), wa = float_values(dequantize(wb));
    std::vector<double> magnitude(m * n, 0.0);
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j)
        for (int64_t l = 0; l < k; ++l) magnitude[i * n + j] += std::fabs(static_cast<double>(xa[i * k + l]) * wa[j * k + l]);
    for (const DType y_type : {DType::F32, DType::Bf16}) {
      for (const bool accumulate : {false, true}) {
        std::vector<float> results[2];
        for (const bool own : {true, false}) {
          cuda::GemmContext context({.block_kernel = own});
          Tensor y = host_tensor(random_normal(m * n, 9), {m, n}, y_type).to(Device::Cuda);
          cuda::GemmArgs args;
          args.m = m, args.n = n, args.k = k;
          args.a = xb.codes.device_data<std::byte>(), args.a_type = xb.codes.dtype();
          args.b = wb.codes.device_data<std::byte>(), args.b_type = wb.codes.dtype();
          args.y = y.device_data<std::byte>(), args.y_type = y_type;
          args.a_scale_inv = x_scales.device_data<float>(), args.b_scale_inv = wb.scale_inv.device_data<float>();
          args.a_scale_mode = cuda::ScaleMode::Vec128, args.b_scale_mode = cuda::ScaleMode::Block128;
          args.epilogue = cuda::Epilogue::Bias, args.bias = bias.device_data<std::byte>();
          args.accumulate = accumulate;
          context.gemm(args);
          EXPECT_EQ(context.block_kernel_gemms(), own ? 1u : 0u);
          results[own ? 0 : 1] = float_values(y);
        }
        for (int64_t i = 0; i < m * n; ++i) {
          const double tol = (y_type == DType::Bf16 ? 0x1p-7 : 0.0) * std::fabs(results[1][i]) + 0x1p-12 * magnitude[i];
          ASSERT_NEAR(results[0][i], results[1][i], tol)
              << name(fa) << " x " << name(fb) << " -> " << name(y_type) << (accumulate ? " accumulating" : "")
              << " at " << i / n << "," << i % n;
        }
      }
    }
  }
}

TEST(QTensorOnBothBackends, UnsupportedPairsAndFastAccumulationAreRefused) {
  FP8KIT_REQUIRE_GPU();
  const Tensor x = host_tensor(random_normal(64 * 128, 3), {64, 128}).to(Device::Cuda);
  const QTensor row = quantize(x, {.granularity = Granularity::PerRow});
  const QTensor tile = quantize(x, {.granularity = Granularity::Block1x128});
  const QTensor block = quantize(x, {.granularity = Granularity::Block128x128});
  Tensor y({64, 64}, DType::F32, Device::Cuda);
  EXPECT_THROW(matmul(row, block, y), Error);
  EXPECT_THROW(matmul(tile, block, y, {.fast_accumulation = true}), Error);
  EXPECT_NO_THROW(matmul(tile, block, y));
}

}  // namespace
}  // namespace fp8kit::ops
