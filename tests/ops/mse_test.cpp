// The MSE loss: the mean of squares against a double reference over several pieces, the gradient
// 2 (y - t) / n bit for bit, dy in place of y, and the argument errors.
#include "ops/mse.h"

#include "common/error_of.h"
#include "common/gradient_check.h"
#include "cpu_op_test.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <vector>

namespace fp8kit::ops {
namespace {

TEST(Mse, LossIsTheMeanSquareAndTheGradientTwiceTheDifferenceOverN) {
  for (const int64_t rows : {1, 3, 40}) {  // 40 x 300: three pieces, the last partial
    const int64_t cols = 300, n = rows * cols;
    const auto y = testing::random_vector(n, 1, -3, 3), t = testing::random_vector(n, 2, -1, 1);
    Context c;
    Tensor loss, dy;
    const Tensor yt = testing::host_tensor(y, {rows, cols});
    mse_loss(c, yt, testing::host_tensor(t, {rows, cols}), loss, dy);
    double want = 0;
    for (int64_t i = 0; i < n; ++i) want += (double(y[i]) - t[i]) * (double(y[i]) - t[i]);
    want /= static_cast<double>(n);
    EXPECT_NEAR(loss.data<float>()[0], want, 1e-6 * want) << rows;
    ASSERT_EQ(dy.shape(), yt.shape());
    const float factor = 2.0f / static_cast<float>(n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(dy.data<float>()[i], (y[i] - t[i]) * factor) << i;

    Tensor in_place = testing::host_tensor(y, {rows, cols}), loss2;
    mse_loss(c, in_place, testing::host_tensor(t, {rows, cols}), loss2, in_place);
    EXPECT_EQ(loss2.data<float>()[0], loss.data<float>()[0]);
    EXPECT_TRUE(testing::same_bits(in_place.span<float>(), dy.span<float>()));
  }
}

TEST(Mse, ErrorsNameTheOpTheTensorAndTheFix) {
  using testing::error_of;
  using ::testing::HasSubstr;
  Context c;
  Tensor y({2, 4}, DType::F32), t({2, 3}, DType::F32), t16({2, 4}, DType::Bf16), loss, dy;
  EXPECT_THAT(error_of([&] { mse_loss(c, y, t, loss, dy); }),
              HasSubstr("mse_loss: the target [2, 3] must have y's shape [2, 4]"));
  EXPECT_THAT(error_of([&] { mse_loss(c, y, t16, loss, dy); }), HasSubstr("mse_loss: the target must be f32"));
}

}  // namespace
}  // namespace fp8kit::ops
