// GELU: the tanh approximation and its derivative against double references (and finite differences),
// and the inference op: bf16 bits of gelu of the bf16 input, fp8 outputs quantize's of those, errors.
#include "ops/gelu.h"

#include "common/activation_out_checks.h"
#include "common/error_of.h"
#include "common/gradient_check.h"
#include "cpu_op_test.h"
#include "numerics/cast.h"
#include "ops/activation.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace fp8kit::ops {
namespace {

double gelu_ref(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

TEST(Gelu, TanhApproximationAndItsDerivative) {
  for (float x : testing::random_vector(2000, 1, -12.0f, 12.0f)) {
    const double want = gelu_ref(x);
    // x/2 (1 + tanh(u)) cancels for negative x (as PyTorch's formula does): tanhf's absolute error
    // times |x| / 2 bounds the float result's.
    ASSERT_NEAR(gelu(x), want, 4e-7 * std::abs(want) + 1e-7 * std::abs(x)) << x;
    const double h = 1e-4;
    const double fd = (gelu_ref(x + h) - gelu_ref(x - h)) / (2 * h);
    ASSERT_NEAR(gelu_grad(x), fd, 2e-6) << x;
  }
  EXPECT_EQ(gelu(0.0f), 0.0f);
  EXPECT_FLOAT_EQ(gelu_grad(0.0f), 0.5f);
  EXPECT_EQ(gelu(1e30f), 1e30f);  // x^3 overflows: tanh(inf) = 1
  EXPECT_EQ(gelu(-1e30f), 0.0f);
  EXPECT_TRUE(std::isnan(gelu(NAN)));
}

TEST(GeluOp, Bf16OutputIsGeluOfTheBf16InputRounded) {
  const int64_t rows = 70, cols = 1000;  // threaded
  const Tensor x = testing::host_tensor(testing::random_vector(rows * cols, 2, -6, 6), {rows, cols}, DType::Bf16);
  Context c;
  Tensor out;
  gelu(c, x, {.bf16 = &out});
  ASSERT_EQ(out.shape(), (std::vector<int64_t>{rows, cols}));
  const std::vector<float> in = testing::float_values(x), got = testing::float_values(out);
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(got[i], round_bf16(gelu(in[i]))) << i;
}

TEST(GeluOp, Fp8OutputsAreQuantizeOfTheBf16Result) {
  Context c;
  const Tensor x = testing::host_tensor(testing::random_vector(6 * 96, 3, -8, 8), {6, 96}, DType::Bf16);
  testing::expect_fp8_is_quantized_bf16(c, [&](const ActivationOut& out) { gelu(c, x, out); });
}

TEST(GeluOp, ErrorsNameTheOpTheTensorAndTheFix) {
  using testing::error_of;
  using ::testing::HasSubstr;
  Context c;
  Tensor flat({8}, DType::Bf16), f32({2, 8}, DType::F32), out;
  EXPECT_THAT(error_of([&] { gelu(c, flat, {.bf16 = &out}); }), HasSubstr("gelu: x must be [rows, cols] bf16, got [8]"));
  EXPECT_THAT(error_of([&] { gelu(c, f32, {.bf16 = &out}); }), HasSubstr("gelu: x must be bf16"));
}

}  // namespace
}  // namespace fp8kit::ops
