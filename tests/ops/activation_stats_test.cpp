// Calibration statistics: per-channel amax and the magnitude histogram against a plain loop (NaN
// skipped, inf counted, negative values by magnitude), accumulated over two calls, f32 and bf16, the
// same at any thread count; the argument errors.
#include "ops/activation_stats.h"

#include "common/error_of.h"
#include "common/gradient_check.h"
#include "cpu_op_test.h"
#include "numerics/histogram.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <limits>
#include <vector>

namespace fp8kit::ops {
namespace {

// Values spanning the histogram (2^-40 .. 2^40), with NaN, +-inf, zeros and negatives.
std::vector<float> stats_values(int64_t n, uint64_t seed) {
  auto v = testing::random_vector(n, seed, -40, 40);
  const auto signs = testing::random_vector(n, seed + 1);
  for (int64_t i = 0; i < n; ++i) v[i] = std::copysign(std::exp2(v[i]), signs[i]);
  v[0] = std::numeric_limits<float>::quiet_NaN();
  if (n > 3) v[1] = -std::numeric_limits<float>::infinity(), v[2] = 0.0f, v[3] = -0.0f;
  return v;
}

void accumulate_reference(const std::vector<float>& x, int64_t cols, std::vector<float>& amax,
                          std::vector<int32_t>& hist) {
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isnan(x[i])) continue;
    const float m = std::fabs(x[i]);
    amax[i % cols] = std::max(amax[i % cols], m);
    ++hist[histogram_bin(m)];
  }
}

TEST(ActivationStats, AccumulatesChannelAmaxAndHistogram) {
  for (const DType dtype : {DType::F32, DType::Bf16}) {
    for (const auto& [rows, cols] : {std::pair<int64_t, int64_t>{1, 1}, {7, 33}, {300, 300}}) {
      Context c;
      Tensor amax({cols}, DType::F32), hist({kHistogramBins}, DType::I32);
      std::vector<float> want_amax(cols, 0.0f);
      std::vector<int32_t> want_hist(kHistogramBins, 0);
      for (uint64_t call = 0; call < 2; ++call) {
        const Tensor x = testing::host_tensor(stats_values(rows * cols, 40 + 2 * call), {rows, cols}, dtype);
        accumulate_activation_stats(c, x, amax, &hist);
        accumulate_reference(testing::float_values(x), cols, want_amax, want_hist);
      }
      EXPECT_TRUE(testing::same_bits(amax.span<float>(), want_amax)) << name(dtype) << " " << rows << "x" << cols;
      EXPECT_EQ(std::vector<int32_t>(hist.span<int32_t>().begin(), hist.span<int32_t>().end()), want_hist)
          << name(dtype) << " " << rows << "x" << cols;
      EXPECT_TRUE(std::isinf(want_amax[1 % cols]) || cols == 1);
    }
  }
}

TEST(ActivationStats, WithoutHistogramAndAtAnyThreadCount) {
  const Tensor x = testing::host_tensor(stats_values(400 * 200, 50), {400, 200}, DType::Bf16);
  Context c;
  Tensor amax1({200}, DType::F32), amax4({200}, DType::F32), hist1({kHistogramBins}, DType::I32),
      hist4({kHistogramBins}, DType::I32), amax_only({200}, DType::F32);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  accumulate_activation_stats(c, x, amax1, &hist1);
  omp_set_num_threads(4);
  accumulate_activation_stats(c, x, amax4, &hist4);
  omp_set_num_threads(threads);
  accumulate_activation_stats(c, x, amax_only, nullptr);
  EXPECT_TRUE(testing::same_bits(amax1.span<float>(), amax4.span<float>()));
  EXPECT_TRUE(testing::same_bits(amax1.span<float>(), amax_only.span<float>()));
  EXPECT_TRUE(std::equal(hist1.span<int32_t>().begin(), hist1.span<int32_t>().end(), hist4.span<int32_t>().begin()));
}

TEST(ActivationStats, ErrorsNameTheOpTheTensorAndTheFix) {
  using testing::error_of;
  using ::testing::HasSubstr;
  Context c;
  Tensor x({4, 8}, DType::F32), x3({2, 2, 8}, DType::F32), amax({8}, DType::F32), short_amax({7}, DType::F32),
      hist({10}, DType::I32);
  EXPECT_THAT(error_of([&] { accumulate_activation_stats(c, x3, amax, nullptr); }),
              HasSubstr("accumulate_activation_stats: x must be [rows, cols] (view [batch, seq, dim]"));
  EXPECT_THAT(error_of([&] { accumulate_activation_stats(c, x, short_amax, nullptr); }),
              HasSubstr("channel_amax (one per column of x, zeroed first) must be [8], got [7]"));
  EXPECT_THAT(error_of([&] { accumulate_activation_stats(c, x, amax, &hist); }),
              HasSubstr("histogram (kHistogramBins counts, zeroed first) must be [1024], got [10]"));
}

}  // namespace
}  // namespace fp8kit::ops
