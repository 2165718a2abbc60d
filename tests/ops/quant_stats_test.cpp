// Quantization statistics on hand-made tensors whose saturated, flushed and subnormal values are
// known (E4M3 and E5M2, multiply and Keras's divide), NaN and inf, the amax history's max, the SNR,
// the op on Tensors against the reference, and its argument errors.
#include "ops/quant_stats.h"

#include "common/error_of.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace fp8kit::ops {
namespace {

using ::testing::HasSubstr;

double squares(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += static_cast<double>(v) * v;
  return s;
}

TEST(QuantStats, E4M3CountsWhatSaturatesAndUnderflows) {
  // 500 and -1000 clamp to +-448; 0.0004 is under half E4M3's smallest subnormal (2^-9) and flushes;
  // 0.01 becomes 5 * 2^-9, a subnormal; 448, 1, -3 and 0 are exact (0 is no underflow).
  const std::vector<float> x = {500.0f, -1000.0f, 448.0f, 0.0004f, 0.01f, 1.0f, 0.0f, -3.0f};
  const float scale = 1.0f;
  const QuantStatsRecord r = cpu::quant_stats(x, {Fp8Format::E4M3, &scale});
  EXPECT_EQ(r.count, 8u);
  EXPECT_EQ(r.nonfinite, 0u);
  EXPECT_EQ(r.saturated, 2u);
  EXPECT_EQ(r.flushed, 1u);
  EXPECT_EQ(r.subnormal, 1u);
  EXPECT_EQ(r.amax, 1000.0f);
  EXPECT_EQ(r.scale, 1.0f);
  EXPECT_EQ(r.history_amax, 0.0f);
  EXPECT_DOUBLE_EQ(r.sum_squares, squares(x));
  const double e_small = static_cast<double>(0.01f) - 5 * 0x1p-9;
  const double errors = 52.0 * 52.0 + 552.0 * 552.0 + static_cast<double>(0.0004f) * 0.0004f + e_small * e_small;
  EXPECT_DOUBLE_EQ(r.error_squares, errors);

  QuantStats s{r};
  EXPECT_DOUBLE_EQ(s.saturated_fraction(), 2.0 / 8);
  EXPECT_DOUBLE_EQ(s.flushed_fraction(), 1.0 / 8);
  EXPECT_DOUBLE_EQ(s.subnormal_fraction(), 1.0 / 8);
  EXPECT_DOUBLE_EQ(s.underflow_fraction(), 2.0 / 8);
  ASSERT_TRUE(s.snr_db());
  EXPECT_DOUBLE_EQ(*s.snr_db(), 10 * std::log10(squares(x) / errors));
}

TEST(QuantStats, E5M2WithAScaleAndKerasDivide) {
  // x * 2: 60000 clamps to 57344; 2e-6 flushes (E5M2's smallest subnormal is 2^-16 = 1.5e-5); 2e-5
  // becomes 2^-16, a subnormal; 2 and -1.5 are exact.
  const std::vector<float> x = {30000.0f, 1e-6f, 1e-5f, 1.0f, -0.75f};
  const float scale = 2.0f, multiplier = 0.5f;  // Keras's lag: q = fp8(x / 0.5), the same codes
  const float history[] = {1.0f, 5.0f, 3.0f};
  const QuantStatsRecord m = cpu::quant_stats(x, {Fp8Format::E5M2, &scale, false, history, 3});
  const QuantStatsRecord d = cpu::quant_stats(x, {Fp8Format::E5M2, &multiplier, true, history, 3});
  for (const QuantStatsRecord& r : {m, d}) {
    EXPECT_EQ(r.count, 5u);
    EXPECT_EQ(r.saturated, 1u);
    EXPECT_EQ(r.flushed, 1u);
    EXPECT_EQ(r.subnormal, 1u);
    EXPECT_EQ(r.amax, 30000.0f);
    EXPECT_EQ(r.scale, 2.0f);
    EXPECT_EQ(r.history_amax, 5.0f);
  }
  EXPECT_EQ(m.error_squares, d.error_squares);
  const double e_sub = static_cast<double>(1e-5f) - 0x1p-16 / 2;
  EXPECT_DOUBLE_EQ(m.error_squares, (30000.0 - 28672.0) * (30000.0 - 28672.0) +
                                        static_cast<double>(1e-6f) * 1e-6f + e_sub * e_sub);
}

TEST(QuantStats, NanAndInfAreCountedApart) {
  const std::vector<float> x = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity(),
                                2.0f, 0.0f};
  const float scale = 1.0f;
  const QuantStats s{cpu::quant_stats(x, {Fp8Format::E4M3, &scale})};
  EXPECT_EQ(s.raw.nonfinite, 2u);
  EXPECT_EQ(s.raw.saturated, 0u);
  EXPECT_TRUE(std::isinf(s.raw.amax));
  EXPECT_DOUBLE_EQ(s.raw.sum_squares, 4.0);
  EXPECT_DOUBLE_EQ(s.nonfinite_fraction(), 0.5);
  EXPECT_TRUE(std::isinf(*s.snr_db()));  // what is finite casts exactly

  const std::vector<float> zeros(4, 0.0f);
  EXPECT_FALSE(QuantStats{cpu::quant_stats(zeros, {Fp8Format::E4M3, &scale})}.snr_db());
}

TEST(QuantStats, OpOnTensorsIsTheReference) {
  Context c;
  std::vector<float> x(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * i) * std::exp2(static_cast<float>(i % 40) - 20);
  Tensor t({10, 100}, DType::F32), record({kQuantStatsWords}, DType::I32),
      partials({kQuantStatsParts * kQuantStatsWords}, DType::I32), scale({1}, DType::F32);
  std::memcpy(t.data<float>(), x.data(), x.size() * sizeof(float));
  scale.data<float>()[0] = 3.0f;
  const QuantStatsSpec spec{Fp8Format::E4M3, scale.data<float>()};
  quant_stats(c, t, spec, record, partials);
  const QuantStats s = decode_quant_stats(record.span<int32_t>());
  const QuantStatsRecord r = cpu::quant_stats(x, spec);
  EXPECT_EQ(std::memcmp(&s.raw, &r, sizeof r), 0);
  EXPECT_GT(r.flushed + r.subnormal, 0u);
  EXPECT_GT(r.saturated, 0u);
}

TEST(QuantStats, Errors) {
  Context c;
  Tensor x({4}, DType::F32), record({3}, DType::I32), partials({kQuantStatsParts * kQuantStatsWords}, DType::I32);
  const float scale = 1.0f;
  EXPECT_THAT(testing::error_of([&] { quant_stats(c, x, {Fp8Format::E4M3, &scale}, record, partials); }),
              HasSubstr("the record"));
  Tensor good({kQuantStatsWords}, DType::I32);
  EXPECT_THAT(testing::error_of([&] { quant_stats(c, x, {Fp8Format::E4M3, nullptr}, good, partials); }),
              HasSubstr("scale is missing"));
  EXPECT_THAT(testing::error_of([&] { decode_quant_stats(record.span<int32_t>()); }), HasSubstr("18 words"));
}

}  // namespace
}  // namespace fp8kit::ops
