// Element-wise ops on Tensors: add is the seed model's residual sum (float32, and rounded to bf16);
// convert rounds f32 to bf16 (to nearest even) and widens bf16 exactly;
// sum_dropout_backward has the bits of the CPU model's residual gradient into the embedding dropout
// (the attention's dx = (dxq + dxk) + dxv, d_r1 + dx, the dropout's backward), with 1 to 3 tensors
// after a, dropout active and inactive, in place; and their argument errors.
#include "ops/elementwise.h"

#include "common/error_of.h"
#include "common/gradient_check.h"
#include "cpu_op_test.h"
#include "numerics/cast.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace fp8kit::ops {
namespace {

TEST(AddOp, SumsInFloat32AndRoundsToBf16) {
  const auto a = testing::random_vector(3 * 37, 1, -4, 4), b = testing::random_vector(3 * 37, 2, -4, 4);
  Context c;
  const Tensor ta = testing::host_tensor(a, {3, 37}), tb = testing::host_tensor(b, {3, 37});
  for (const bool bf16 : {false, true}) {
    Tensor out;
    add(c, ta, tb, bf16, out);
    ASSERT_EQ(out.shape(), ta.shape());
    for (size_t i = 0; i < a.size(); ++i) {
      const float want = bf16 ? round_bf16(a[i] + b[i]) : a[i] + b[i];
      ASSERT_EQ(out.data<float>()[i], want) << i;
    }
    Tensor in_place = ta.clone();
    add(c, in_place, tb, bf16, in_place);
    EXPECT_TRUE(testing::same_bits(in_place.span<float>(), out.span<float>()));
  }
}

TEST(ConvertOp, RoundsToBf16AndWidensExactly) {
  std::vector<float> v = testing::random_vector(3 * 37, 1, -4, 4);
  v[0] = 1.00390625f;  // halfway between bf16 1 and 1 + 2^-7: to the even one
  v[1] = std::numeric_limits<float>::quiet_NaN();
  Context c;
  Tensor bf16, back;
  convert(c, testing::host_tensor(v, {3, 37}), DType::Bf16, bf16);
  ASSERT_EQ(bf16.dtype(), DType::Bf16);
  ASSERT_EQ(bf16.shape(), (std::vector<int64_t>{3, 37}));
  for (size_t i = 0; i < v.size(); ++i) ASSERT_EQ(bf16.data<uint16_t>()[i], float_to_bf16(v[i])) << i;
  EXPECT_EQ(bf16.data<uint16_t>()[0], float_to_bf16(1.0f));
  convert(c, bf16, DType::F32, back);
  ASSERT_EQ(back.dtype(), DType::F32);
  for (size_t i = 2; i < v.size(); ++i) ASSERT_EQ(back.data<float>()[i], round_bf16(v[i])) << i;
  EXPECT_TRUE(std::isnan(back.data<float>()[1]));
  Tensor same;
  convert(c, back, DType::F32, same);
  EXPECT_TRUE(testing::same_bits(same.span<float>(), back.span<float>()));
}

TEST(SumDropoutBackwardOp, MatchesTheModelsResidualGradientBitForBit) {
  const int64_t n = 5 * 41;
  const auto a = testing::random_vector(n, 1, -3, 3), q = testing::random_vector(n, 2, -3, 3),
             k = testing::random_vector(n, 3, -3, 3), v = testing::random_vector(n, 4, -3, 3);
  Context c(Device::Cpu, 11);
  c.set_step(6);
  const Tensor ta = testing::host_tensor(a, {5, 41}), tq = testing::host_tensor(q, {5, 41}),
               tk = testing::host_tensor(k, {5, 41}), tv = testing::host_tensor(v, {5, 41});
  for (const bool bf16 : {false, true}) {
    for (const bool training : {false, true}) {
      for (const int more : {1, 2, 3}) {
        // The CPU model: nn::CausalSelfAttention's dx, then add(d_r1, dx, bf16=false), then the dropout.
        std::vector<float> dx(n), sum(n);
        for (int64_t i = 0; i < n; ++i) dx[i] = more == 1 ? q[i] : more == 2 ? q[i] + k[i] : q[i] + k[i] + v[i];
        for (int64_t i = 0; i < n; ++i) sum[i] = a[i] + dx[i];
        std::vector<float> want = sum;
        if (training) dropout_backward(DropoutMask(11, 6, 2, 0.3f), 0.3f, bf16, sum, want);

        const DropoutSpec spec{2, 0.3f, training};
        Tensor out;
        const Tensor* branches[] = {&tq, &tk, &tv};
        sum_dropout_backward(c, ta, std::span<const Tensor* const>(branches, more), bf16, spec, out);
        EXPECT_TRUE(testing::same_bits(out.span<float>(), want))
            << "bf16 " << bf16 << " training " << training << " tensors " << more + 1;
      }
      Tensor in_place = ta.clone();
      Tensor out;
      const Tensor* branches[] = {&tq, &tk, &tv};
      sum_dropout_backward(c, ta, branches, bf16, {2, 0.3f, training}, out);
      sum_dropout_backward(c, in_place, branches, bf16, {2, 0.3f, training}, in_place);
      EXPECT_TRUE(testing::same_bits(in_place.span<float>(), out.span<float>()));
    }
  }
}

TEST(ElementwiseOps, ErrorsNameTheOpAndTheTensor) {
  Context c;
  const Tensor a({4, 8}, DType::F32), b({8, 4}, DType::F32), b16({4, 8}, DType::Bf16);
  Tensor out;
  EXPECT_EQ(testing::error_of([&] { add(c, a, b, false, out); }), "add: b (a's shape) must be [4, 8], got [8, 4]");
  const Tensor* wrong_dtype[] = {&a, &b16};
  EXPECT_EQ(testing::error_of([&] { sum_dropout_backward(c, a, wrong_dtype, false, {}, out); }),
            "sum_dropout_backward: tensor 2 after a (a's shape) must be f32, got bf16");
  EXPECT_EQ(testing::error_of([&] { sum_dropout_backward(c, a, {}, false, {}, out); }),
            "sum_dropout_backward: takes 1 to 3 tensors after a, got 0");
  const Tensor* four[] = {&a, &a, &a, &a};
  EXPECT_EQ(testing::error_of([&] { sum_dropout_backward(c, a, four, false, {}, out); }),
            "sum_dropout_backward: takes 1 to 3 tensors after a, got 4");
  EXPECT_EQ(testing::error_of([&] { convert(c, a, DType::E4M3, out); }), "convert: to f32 or bf16, not e4m3");
  Tensor self = a.clone();
  EXPECT_EQ(testing::error_of([&] { convert(c, self, DType::Bf16, self); }), "convert: out must not be src");
  const Tensor* null[] = {&a, nullptr};
  EXPECT_EQ(testing::error_of([&] { sum_dropout_backward(c, a, null, false, {}, out); }),
            "sum_dropout_backward: tensor 2 after a is null");
}

}  // namespace
}  // namespace fp8kit::ops
