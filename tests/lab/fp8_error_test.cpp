// lab/fp8_error.h and lab/formats_table.h: the lab's simulation, the real-cast sweep, delayed scaling
// over steps, and the formats table's constants.
#include "lab/fp8_error.h"
#include "lab/formats_table.h"

#include <gtest/gtest.h>

#include <cmath>

namespace fp8kit::lab {
namespace {

TEST(LabModel, FixedGridClippedAtTheMax) {
  EXPECT_EQ(lab_model(0.3f, Fp8Format::E4M3), 0.25f);    // 1/8 grid (real E4M3: 0.3125)
  EXPECT_EQ(lab_model(0.04f, Fp8Format::E4M3), 0.0f);    // real E4M3 keeps 0.0390625
  EXPECT_EQ(lab_model(100.3f, Fp8Format::E4M3), 100.25f);  // real E4M3: 104
  EXPECT_EQ(lab_model(0.3f, Fp8Format::E5M2), 0.25f);
  EXPECT_EQ(lab_model(1000.0f, Fp8Format::E4M3), 448.0f);
  EXPECT_EQ(lab_model(-1e6f, Fp8Format::E5M2), -57344.0f);
}

TEST(MagnitudeSweep, RealFp8WithinHalfAStepOverTheNormalRange) {
  const MagnitudeSweep s = magnitude_sweep(-1.0f, 3.0f, 301);  // 0.1 .. 100
  ASSERT_EQ(s.magnitude.size(), 301u);
  EXPECT_FLOAT_EQ(s.magnitude.front(), 0.1f);
  EXPECT_FLOAT_EQ(s.magnitude.back(), 100.0f);
  for (size_t i = 0; i < s.magnitude.size(); ++i) {
    EXPECT_LE(s.real[0][i], 1.0 / 16) << s.magnitude[i];  // E4M3: half of 2^-3
    EXPECT_LE(s.real[1][i], 1.0 / 8) << s.magnitude[i];   // E5M2: half of 2^-2
  }
  // The lab's fixed grid: at 100 its step is 1/8, far finer than E4M3's 8.
  EXPECT_LT(s.lab[0].back(), 1e-3);
  std::vector<double> x, y;
  worst_per_bin(s, s.real[0], 30, x, y);
  EXPECT_EQ(x.size(), 10u);
  EXPECT_NEAR(x.front(), std::sqrt(s.magnitude[0] * s.magnitude[30]), 1e-9);
}

TEST(DelayedScaling, CurrentScalingNeverSaturatesAndLongHistoriesHoldASpike) {
  const std::vector<Scenario> scenarios = delayed_scenarios();
  ASSERT_EQ(scenarios.size(), 4u);
  const Scenario& spike = scenarios[2];
  ASSERT_EQ(spike.id, "spike");
  const auto current = simulate(spike, {.mode = ScalingMode::Current, .amax_history_length = 1}, 40, 1);
  EXPECT_EQ(summarize(current).saturated_steps, 0);
  // Max of 4 forgets the spike (step 10) by step 15; max of 32 still scales for it at step 30.
  const auto short_history = simulate(spike, {.amax_history_length = 4}, 40, 1);
  const auto long_history = simulate(spike, {.amax_history_length = 32}, 40, 1);
  EXPECT_GT(long_history[30].scale_inv, 100 * short_history[30].scale_inv);
  EXPECT_GT(summarize(long_history).mean_relative, summarize(short_history).mean_relative);
  // Same seed, same tensors: every method sees the same amaxes.
  EXPECT_EQ(current[7].amax, long_history[7].amax);
}

TEST(DelayedScaling, LabPart4HasTheOneStepLag) {
  const std::vector<LabStep> steps = lab_part4(42);
  ASSERT_EQ(steps.size(), 16u);
  EXPECT_EQ(steps[0].proper.scale_inv, 1.0f);  // nothing recorded before step 0
  EXPECT_FLOAT_EQ(steps[1].proper.scale_inv, steps[0].proper.amax / 448.0f);
  int saturated = 0;
  for (const LabStep& s : steps) {
    saturated += s.proper.error.saturated_pct > 0;
    EXPECT_LT(s.lab_error, s.proper.error.mean_abs);  // the lab's simulator looks better than real FP8
  }
  EXPECT_GT(saturated, 0);  // a growing tensor outruns its delayed scale
}

TEST(ErrorStats, ElementRelativeErrorCountsFlushedValues) {
  const std::vector<float> x{1.0f, 1e-9f, -2.0f, 0.0f};
  const ErrorStats s = quantization_error(x, Fp8Format::E4M3, 1.0f);
  EXPECT_NEAR(s.element_relative, 1.0 / 3, 1e-6);  // 1e-9 flushes (100%), 1 and -2 are exact, 0 is skipped
  EXPECT_NEAR(s.flushed_pct, 25.0, 1e-9);
  EXPECT_EQ(s.saturated_pct, 0.0);
}

TEST(FormatsTable, OneColumnPerFormat) {
  const FormatsTable t = formats_table();
  ASSERT_EQ(t.header, (report::CsvRow{"", "e4m3", "e5m2", "bf16", "fp16"}));
  for (const report::CsvRow& row : t.rows) EXPECT_EQ(row.size(), t.header.size()) << row[0];
  EXPECT_EQ(t.rows[2][0], "max finite");
  EXPECT_EQ(t.rows[2][1], "448");
  EXPECT_EQ(t.rows[2][2], "57344");
}

}  // namespace
}  // namespace fp8kit::lab
