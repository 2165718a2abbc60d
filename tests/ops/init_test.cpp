// fill_normal: the generator's log and cos against the C library, the moments of a million values,
// element i is normal::value(seed, i) * stddev (bf16: rounded), seeds give other streams; the errors.
#include "ops/init.h"

#include "common/error_of.h"
#include "cpu_op_test.h"
#include "numerics/cast.h"
#include "ops/normal_value.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

namespace fp8kit::ops {
namespace {

TEST(NormalValue, LogAndCosAreAccurate) {
  for (uint32_t m = 1; m <= (1u << 24); m = m * 3 + 1) {
    const double want = std::log(m * std::exp2(-24.0));
    EXPECT_NEAR(normal::log_of_fraction(m), want, 2e-7 * (1 + std::fabs(want))) << m;
  }
  EXPECT_EQ(normal::log_of_fraction(1u << 24), 0.0f);
  for (uint32_t k = 0; k < (1u << 24); k += 4099) {
    EXPECT_NEAR(normal::cos_of_turn(k), std::cos(2 * M_PI * k * std::exp2(-24.0)), 3e-7) << k;
  }
}

TEST(FillNormal, MomentsAndTheGeneratorsBits) {
  const int64_t n = 1 << 20;
  Context c;
  Tensor t({n}, DType::F32), h({n}, DType::Bf16), other({n}, DType::F32);
  fill_normal(c, t, 0.02f, 7);
  fill_normal(c, h, 0.02f, 7);
  fill_normal(c, other, 0.02f, 8);
  double sum = 0, sq = 0, fourth = 0;
  int64_t same = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = t.data<float>()[i];
    ASSERT_EQ(v, normal::value(7, i) * 0.02f) << i;
    ASSERT_EQ(h.data<uint16_t>()[i], float_to_bf16(v)) << i;
    same += other.data<float>()[i] == v;
    const double z = v / 0.02;
    sum += z, sq += z * z, fourth += z * z * z * z;
  }
  EXPECT_NEAR(sum / n, 0.0, 5e-3);
  EXPECT_NEAR(sq / n, 1.0, 5e-3);
  EXPECT_NEAR(fourth / n, 3.0, 3e-2);  // a normal's kurtosis
  EXPECT_LT(same, 10);
}

TEST(FillNormal, ErrorsNameTheOpTheTensorAndTheFix) {
  using testing::error_of;
  using ::testing::HasSubstr;
  Context c;
  Tensor ints({3}, DType::I32), t({3}, DType::F32);
  EXPECT_THAT(error_of([&] { fill_normal(c, ints, 1.0f, 0); }),
              HasSubstr("fill_normal: t must be f32 or bf16, got i32"));
  EXPECT_THAT(error_of([&] { fill_normal(c, t, -1.0f, 0); }), HasSubstr("fill_normal: stddev must be finite and >= 0"));
}

}  // namespace
}  // namespace fp8kit::ops
