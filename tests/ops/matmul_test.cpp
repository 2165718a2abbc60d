// Tensor-level matmul on the CPU against a double-precision triple loop over the very values the
// GEMM reads (bf16 widened, FP8 codes decoded and scaled), with bias and bf16 output rounding; and
// the errors for shapes, dtypes and devices that do not fit.
#include "ops/matmul.h"

#include "base/error.h"
#include "common/gradient_check.h"
#include "common/host_tensors.h"

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
  const Fp8Tensor xq = quantize_fp8_current(x, Fp8Format::E4M3), wq = quantize_fp8_current(w, Fp8Format::E5M2);
  const Tensor bias = testing::host_tensor(testing::random_vector(n, 6), {n}, DType::Bf16);
  Tensor y({m, n}, DType::F32);
  matmul(xq, wq, y, {.bias = &bias});
  const Tensor xd = dequantize(xq), wd = dequantize(wq);
  const std::vector<double> ref = reference(xd, wd, &bias);
  for (int64_t i = 0; i < m * n; ++i) EXPECT_NEAR(y.data<float>()[i], ref[i], 1e-4) << i;
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
  const Fp8Tensor e5 = quantize_fp8_current(a, Fp8Format::E5M2), e5b = quantize_fp8_current(b, Fp8Format::E5M2);
  EXPECT_THROW(matmul(e5, e5b, y), Error);  // no E5M2 x E5M2 on Hopper
}

}  // namespace
}  // namespace fp8kit::ops
