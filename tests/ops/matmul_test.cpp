// Tensor-level matmul on the CPU against a double-precision triple loop over the very values the
// GEMM reads (bf16 widened, FP8 codes decoded and scaled), with bias and bf16 output rounding; the FP8
// products at every granularity pair (per tensor, per row, per tensor x per row, 1x128 x 128x128,
// 1x128 x 1x128); and the errors for shapes, dtypes, granularities and devices that do not fit.
#include "ops/matmul.h"
#include "ops/quantize.h"

#include "base/error.h"
#include "common/gradient_check.h"
#include "common/host_tensors.h"
#include "numerics/cast.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace fp8kit::ops {
namespace {

// ref[i, j] = sum_l a[i, l] b[j, l] + bias[j], a and b as the floats they hold.
std::vector<double> reference(const Tensor& a, const Tensor& b, const Tensor* bias) {
  const int64_t m = a.dim(0), k = a.dim(1), n = b.dim(0);
  const std::vector<float> av = testing::float_values(a), bv = testing::float_values(b),
                           biasv = bias ? testing::float_values(*bias) : std::vector<float>(n);
  std::vector<double> ref(m * n);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = biasv[j];
      for (int64_t l = 0; l < k; ++l) s += static_cast<double>(av[i * k + l]) * bv[j * k + l];
      ref[i * n + j] = s;
    }
  return ref;
}

TEST(Matmul, Float32AndBf16MatchTheReference) {
  for (DType dtype : {DType::F32, DType::Bf16}) {
    for (DType y_type : {DType::F32, DType::Bf16}) {
      if (dtype == DType::F32 && y_type == DType::Bf16) continue;
      const int64_t m = 17, n = 33, k = 40;
      const Tensor a = testing::host_tensor(testing::random_vector(m * k, 1), {m, k}, dtype);
      const Tensor b = testing::host_tensor(testing::random_vector(n * k, 2), {n, k}, dtype);
      const Tensor bias = testing::host_tensor(testing::random_vector(n, 3), {n}, y_type);
      Tensor y({m, n}, y_type);
      matmul(a, b, y, {.bias = &bias});
      const std::vector<double> ref = reference(a, b, &bias);
      const std::vector<float> got = testing::float_values(y);
      for (int64_t i = 0; i < m * n; ++i) {
        // fp32 accumulation, then bf16 rounding of y (half an ulp: 2^-9 relative).
        const double tol = y_type == DType::Bf16 ? std::fabs(ref[i]) * 0x1p-8 + 1e-5 : 1e-5;
        EXPECT_NEAR(got[i], ref[i], tol) << name(dtype) << " -> " << name(y_type) << " at " << i;
      }
    }
  }
}

TEST(Matmul, Fp8ProductOfQuantizedOperands) {
  const int64_t m = 9, n = 20, k = 48;
  const Tensor x = testing::host_tensor(testing::random_vector(m * k, 4, -2.0f, 2.0f), {m, k});
  const Tensor w = testing::host_tensor(testing::random_vector(n * k, 5, -0.5f, 0.5f), {n, k});
  const QTensor xq = quantize(x, {.format = Fp8Format::E4M3}), wq = quantize(w, {.format = Fp8Format::E5M2});
  const Tensor bias = testing::host_tensor(testing::random_vector(n, 6), {n}, DType::Bf16);
  Tensor y({m, n}, DType::F32);
  matmul(xq, wq, y, {.bias = &bias});
  const Tensor xd = dequantize(xq), wd = dequantize(wq);
  const std::vector<double> ref = reference(xd, wd, &bias);
  for (int64_t i = 0; i < m * n; ++i) EXPECT_NEAR(y.data<float>()[i], ref[i], 1e-4) << i;
}

// The exact product of two quantized operands in double: sum_l decode(a[i, l]) sa(i, l) decode(b[j, l])
// sb(j, l), each scale looked up from its block (extents written out here), and sum_l |term| (`scale`
// of the rounding error bound).
struct Reference {
  std::vector<double> y, magnitude;
};
Reference scaled_reference(const QTensor& a, const QTensor& b) {
  const auto extent = [](const QTensor& q) -> std::pair<int64_t, int64_t> {
    switch (q.spec.granularity) {
      case Granularity::PerTensor: return {q.rows(), q.cols()};
      case Granularity::PerRow: return {1, q.cols()};
      case Granularity::PerGroup: return {1, q.spec.group};
      case Granularity::Block1x128: return {1, 128};
      case Granularity::Block128x128: return {128, 128};
    }
    return {0, 0};
  };
  const auto scale = [&](const QTensor& q, int64_t r, int64_t c) {
    const auto [br, bc] = extent(q);
    const int64_t grid_cols = (q.cols() + bc - 1) / bc;
    return static_cast<double>(q.scale_inv.data<float>()[r / br * grid_cols + c / bc]);
  };
  const int64_t m = a.rows(), n = b.rows(), k = a.cols();
  Reference ref{std::vector<double>(m * n), std::vector<double>(m * n)};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t l = 0; l < k; ++l) {
        const double term = decode_fp8(a.codes.data<uint8_t>()[i * k + l], a.spec.format) * scale(a, i, l) *
                            decode_fp8(b.codes.data<uint8_t>()[j * k + l], b.spec.format) * scale(b, j, l);
        ref.y[i * n + j] += term;
        ref.magnitude[i * n + j] += std::fabs(term);
      }
  return ref;
}

TEST(Matmul, Fp8ProductsAtEveryGranularityMatchTheReference) {
  const QuantSpec tensor{}, row{.granularity = Granularity::PerRow},
      group128{.granularity = Granularity::PerGroup, .group = 128}, tile1x128{.granularity = Granularity::Block1x128},
      block{.granularity = Granularity::Block128x128};
  const std::pair<QuantSpec, QuantSpec> pairs[] = {{tensor, tensor}, {row, row}, {tensor, row}, {tile1x128, block},
                                                   {group128, block}, {tile1x128, group128}};
  struct Shape {
    int64_t m, n, k;
  };
  for (const Shape& s : {Shape{1, 5, 300}, Shape{33, 17, 260}, Shape{130, 140, 384}, Shape{4, 129, 128}}) {
    for (const auto& [sa, sb] : pairs) {
      // Rows and columns of different magnitudes, so that every block has its own scale.
      std::vector<float> xv = testing::random_vector(s.m * s.k, 7, -1.0f, 1.0f), wv = testing::random_vector(s.n * s.k, 8);
      for (int64_t i = 0; i < s.m * s.k; ++i) xv[i] *= std::pow(4.0f, static_cast<float>(i % s.k / 64 + i / s.k % 3));
      for (int64_t i = 0; i < s.n * s.k; ++i) wv[i] *= std::pow(0.25f, static_cast<float>(i / s.k % 5));
      const QTensor x = quantize(testing::host_tensor(xv, {s.m, s.k}), sa);
      const QTensor w = quantize(testing::host_tensor(wv, {s.n, s.k}), {.format = Fp8Format::E5M2,
                                                                         .granularity = sb.granularity,
                                                                         .group = sb.group});
      Tensor y({s.m, s.n}, DType::F32);
      matmul(x, w, y);
      const Reference ref = scaled_reference(x, w);
      for (int64_t i = 0; i < s.m * s.n; ++i) {
        // fp32 sums of exact FP8 products (at most k terms, gamma_k ~ k 2^-24 of the magnitude), each
        // slice's partial times the rounded product of two scales, added slice by slice: a few more ulps.
        const double tol = static_cast<double>(s.k + 8) * 0x1p-24 * ref.magnitude[i];
        ASSERT_NEAR(y.data<float>()[i], ref.y[i], tol)
            << s.m << "x" << s.n << "x" << s.k << " " << name(sa.granularity) << " x " << name(sb.granularity) << " at " << i;
      }
    }
  }
}

// Per tensor x per row is the product of the codes (the same sgemm as a per-tensor product with
// scales 1) times (sa * sb[j]), plus the bias in fp32, then y's rounding: exactly, element by element.
TEST(Matmul, PerTensorTimesPerRowScalesTheProductOfTheCodes) {
  const int64_t m = 5, n = 7, k = 96;
  std::vector<float> wv = testing::random_vector(n * k, 12);
  for (int64_t i = 0; i < n * k; ++i) wv[i] *= std::pow(0.25f, static_cast<float>(i / k % 4));  // a scale per row
  const QTensor x = quantize(testing::host_tensor(testing::random_vector(m * k, 11, -3.0f, 3.0f), {m, k}), {});
  const QTensor w = quantize(testing::host_tensor(wv, {n, k}), {.granularity = Granularity::PerRow});
  QTensor x_codes, w_codes;  // the same codes, per tensor with scale_inv 1
  x_codes.codes = x.codes.to(Device::Cpu);
  x_codes.scale_inv = testing::scalar_tensor(1.0f);
  w_codes.codes = w.codes.to(Device::Cpu);
  w_codes.scale_inv = testing::scalar_tensor(1.0f);
  Tensor dot({m, n}, DType::F32);
  matmul(x_codes, w_codes, dot);
  const Tensor bias = testing::host_tensor(testing::random_vector(n, 13), {n}, DType::Bf16);
  const std::vector<float> bias_values = testing::float_values(bias);
  for (DType y_type : {DType::F32, DType::Bf16}) {
    for (const bool with_bias : {false, true}) {
      Tensor y({m, n}, y_type);
      matmul(x, w, y, {.bias = with_bias ? &bias : nullptr});
      const std::vector<float> got = testing::float_values(y);
      const float sa = x.scale_inv.data<float>()[0];
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) {
          float want = dot.data<float>()[i * n + j] * (sa * w.scale_inv.data<float>()[j]);
          if (with_bias) want += bias_values[j];
          if (y_type == DType::Bf16) want = bf16_to_float(float_to_bf16(want));
          EXPECT_EQ(got[i * n + j], want) << name(y_type) << " bias " << with_bias << " at " << i << ", " << j;
        }
    }
  }
}

TEST(Matmul, OnAContextGivesTheSameProducts) {
  Context c;
  const int64_t m = 33, n = 140, k = 260;
  const Tensor xt = testing::host_tensor(testing::random_vector(m * k, 9), {m, k});
  const Tensor wt = testing::host_tensor(testing::random_vector(n * k, 10), {n, k});
  const QuantSpec group128{.granularity = Granularity::PerGroup, .group = 128},
      block{.granularity = Granularity::Block128x128};
  for (const QuantSpec& sb : {QuantSpec{}, block, group128}) {
    const QuantSpec sa = sb.granularity == Granularity::PerTensor ? QuantSpec{} : group128;
    const QTensor x = quantize(xt, sa), w = quantize(wt, sb);
    Tensor want({m, n}, DType::Bf16), got({m, n}, DType::Bf16);
    matmul(x, w, want);
    matmul(c, x, w, got);
    EXPECT_EQ(testing::float_values(got), testing::float_values(want)) << name(sb.granularity);
  }
  Tensor want({m, n}, DType::F32), got({m, n}, DType::F32);
  matmul(xt, wt, want);
  matmul(c, xt, wt, got);
  EXPECT_EQ(testing::float_values(got), testing::float_values(want));
}

TEST(Matmul, GeluAndAnFp8YAreTheEpiloguesSteps) {
  const int64_t m = 7, n = 24, k = 32;
  const Tensor x = testing::host_tensor(testing::random_vector(m * k, 7, -2.0f, 2.0f), {m, k});
  const Tensor w = testing::host_tensor(testing::random_vector(n * k, 8), {n, k});
  const Tensor bias = testing::host_tensor(testing::random_vector(n, 9), {n}, DType::Bf16);
  const QTensor xq = quantize(x, {}), wq = quantize(w, {});
  Tensor plain({m, n}, DType::F32), with_gelu({m, n}, DType::F32), codes({m, n}, DType::E4M3);
  matmul(xq, wq, plain, {.bias = &bias});
  matmul(xq, wq, with_gelu, {.bias = &bias, .activation = Activation::Gelu});
  const Tensor scale = testing::host_tensor({6.0f}, {1});
  matmul(xq, wq, codes, {.bias = &bias, .activation = Activation::Gelu, .y_scale = &scale});
  for (int64_t i = 0; i < m * n; ++i) {
    const float g = gelu(plain.data<float>()[i]);
    EXPECT_EQ(with_gelu.data<float>()[i], g) << i;
    EXPECT_EQ(codes.data<uint8_t>()[i], encode_fp8(g * 6.0f, Fp8Format::E4M3)) << i;  // quantize's codes
  }
  Tensor bf16({m, n}, DType::Bf16);
  const Tensor xb = testing::host_tensor(testing::float_values(x), {m, k}, DType::Bf16);
  const Tensor wb = testing::host_tensor(testing::float_values(w), {n, k}, DType::Bf16);
  Tensor f32({m, n}, DType::F32);
  matmul(xb, wb, f32, {.bias = nullptr});
  matmul(xb, wb, bf16, {.activation = Activation::Gelu});
  for (int64_t i = 0; i < m * n; ++i)
    EXPECT_EQ(bf16.span<uint16_t>()[i], float_to_bf16(gelu(f32.data<float>()[i]))) << i;  // rounded once
  // No FP8 y from bf16 operands or without a scale; no GELU or FP8 y with per-row scales.
  Tensor codes_bad({m, n}, DType::E4M3);
  EXPECT_THROW(matmul(xq, wq, codes_bad), Error);
  EXPECT_THROW(matmul(xb, wb, codes_bad, {.y_scale = &scale}), Error);
  const QTensor xr = quantize(x, {.granularity = Granularity::PerRow}), wr = quantize(w, {.granularity = Granularity::PerRow});
  EXPECT_THROW(matmul(xr, wr, with_gelu, {.activation = Activation::Gelu}), Error);
  EXPECT_THROW(matmul(xq, wq, plain, {.activation = Activation::Relu}), Error);
}

TEST(Matmul, BadArgumentsSayWhatToFix) {
  const Tensor a({4, 8}, DType::F32), b({3, 8}, DType::F32), b_bad({3, 7}, DType::F32);
  Tensor y({4, 3}, DType::F32), y_bad({3, 4}, DType::F32), y_i32({4, 3}, DType::I32);
  EXPECT_NO_THROW(matmul(a, b, y));
  EXPECT_THROW(matmul(a, b_bad, y), Error);
  EXPECT_THROW(matmul(a, b, y_bad), Error);
  EXPECT_THROW(matmul(a, b, y_i32), Error);
  const Tensor a16({4, 8}, DType::Bf16);
  EXPECT_THROW(matmul(a16, b, y), Error);  // mixed f32 and bf16
  const Tensor wrong_bias({4}, DType::F32);
  EXPECT_THROW(matmul(a, b, y, {.bias = &wrong_bias}), Error);
  const QTensor e5 = quantize(a, {.format = Fp8Format::E5M2}), e5b = quantize(b, {.format = Fp8Format::E5M2});
  EXPECT_THROW(matmul(e5, e5b, y), Error);  // no E5M2 x E5M2 on Hopper
  const QTensor per_tensor = quantize(a, {}), per_row = quantize(b, {.granularity = Granularity::PerRow});
  const QTensor group32 = quantize(a, {.granularity = Granularity::PerGroup, .group = 32});
  const QTensor tile1x128 = quantize(a, {.granularity = Granularity::Block1x128});
  const QTensor block = quantize(b, {.granularity = Granularity::Block128x128});
  EXPECT_NO_THROW(matmul(per_tensor, per_row, y));     // a static activation scale x per-channel weights
  const QTensor a_per_row = quantize(a, {.granularity = Granularity::PerRow}), b_per_tensor = quantize(b, {});
  EXPECT_THROW(matmul(a_per_row, b_per_tensor, y), Error);  // per row x per tensor: no such pair
  EXPECT_THROW(matmul(group32, block, y), Error);       // groups of 32 are no GEMM operand
  EXPECT_THROW(matmul(tile1x128, block, y, {.fast_accumulation = true}), Error);  // split accumulator only
  EXPECT_NO_THROW(matmul(tile1x128, block, y));
}

}  // namespace
}  // namespace fp8kit::ops
