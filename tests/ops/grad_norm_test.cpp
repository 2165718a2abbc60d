// clip_by_global_norm: the norm against a double sum over one and several pieces (and an empty
// buffer), the same bits at any thread count; clipping to max_norm (PyTorch's factor), nothing when the
// norm is below it or max_norm is 0; a sharded gradient clipped by the whole one's norm; the argument
// errors.
#include "ops/grad_norm.h"

#include "common/error_of.h"
#include "common/gradient_check.h"
#include "common/host_tensors.h"
#include "cpu_op_test.h"
#include "ops/cpu/grad_norm.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <vector>

namespace fp8kit::ops {
namespace {

double reference_norm(const std::vector<float>& g) {
  double s = 0;
  for (const float v : g) s += static_cast<double>(v) * v;
  return std::sqrt(s);
}

TEST(GradNorm, IsTheL2NormAtAnyThreadCount) {
  for (const int64_t n : {int64_t{0}, int64_t{1}, int64_t{1000}, 3 * cpu::kGradNormPiece + 7}) {
    const auto g = testing::random_vector(n, 1, -1e-3f, 1e-3f);
    Context c;
    Tensor grads = testing::host_tensor(g, {n}), norm;
    clip_by_global_norm(c, grads, 0.0f, norm);
    EXPECT_EQ(norm.shape(), std::vector<int64_t>{1});
    EXPECT_EQ(norm.data<float>()[0], static_cast<float>(reference_norm(g))) << n;
    EXPECT_TRUE(testing::same_bits(grads.span<float>(), g));  // max_norm 0: no clipping
    const int threads = omp_get_max_threads();
    omp_set_num_threads(1);
    const float one_thread = cpu::global_norm(g.data(), n);
    omp_set_num_threads(threads);
    EXPECT_EQ(one_thread, norm.data<float>()[0]);
  }
}

TEST(GradNorm, ClipsToMaxNormAsPyTorch) {
  const int64_t n = 70000;
  const auto g = testing::random_vector(n, 2);
  Context c;
  Tensor grads = testing::host_tensor(g, {n}), norm;
  clip_by_global_norm(c, grads, 1.5f, norm);
  const float before = norm.data<float>()[0];
  ASSERT_GT(before, 1.5f);
  const float factor = 1.5f / (before + 1e-6f);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(grads.data<float>()[i], g[i] * factor) << i;
  const std::vector<float> clipped(grads.span<float>().begin(), grads.span<float>().end());
  EXPECT_NEAR(reference_norm(clipped), 1.5, 1e-5);
  // Below max_norm: untouched, and the norm reported.
  clip_by_global_norm(c, grads, 100.0f, norm);
  EXPECT_TRUE(testing::same_bits(grads.span<float>(), clipped));
  EXPECT_NEAR(norm.data<float>()[0], 1.5f, 1e-5f);
}

// Two shards, each given the other's sum of squares where a job all-reduces them: the whole
// gradient's norm (up to the sum's rounding to float) and the whole gradient's clipping, on each.
TEST(GradNorm, ShardsAreClippedByTheWholeGradientsNorm) {
  const int64_t n = 70000, half = 30000;
  const auto g = testing::random_vector(n, 3);
  Context c;
  Tensor whole = testing::host_tensor(g, {n}), whole_norm;
  clip_by_global_norm(c, whole, 1.5f, whole_norm);
  const double sums[] = {cpu::sum_of_squares(g.data(), half), cpu::sum_of_squares(g.data() + half, n - half)};
  for (int shard = 0; shard < 2; ++shard) {
    const int64_t first = shard == 0 ? 0 : half, count = shard == 0 ? half : n - half;
    Tensor grads = testing::host_tensor(std::vector<float>(g.begin() + first, g.begin() + first + count), {count}),
           norm;
    int calls = 0;
    clip_by_global_norm(c, grads, 1.5f, norm, [&](Tensor& sum) {
      EXPECT_EQ(sum.data<float>()[0], static_cast<float>(sums[shard]));
      sum.data<float>()[0] += static_cast<float>(sums[1 - shard]);
      ++calls;
    });
    EXPECT_EQ(calls, 1);
    EXPECT_NEAR(norm.data<float>()[0], whole_norm.data<float>()[0], 2e-7 * whole_norm.data<float>()[0]);
    for (int64_t i = 0; i < count; ++i)
      ASSERT_NEAR(grads.data<float>()[i], whole.data<float>()[first + i], 4e-7 * std::abs(g[first + i])) << i;
  }
}

TEST(GradNormOp, ErrorsNameTheOpTheTensorAndTheFix) {
  using testing::error_of;
  using ::testing::HasSubstr;
  Context c;
  Tensor grads({8}, DType::F32), bf16({8}, DType::Bf16), norm;
  EXPECT_THAT(error_of([&] { clip_by_global_norm(c, bf16, 1.0f, norm); }),
              HasSubstr("clip_by_global_norm: grads must be f32, got bf16"));
  Tensor inside = grads.view(7, {1});
  EXPECT_THAT(error_of([&] { clip_by_global_norm(c, grads, 1.0f, inside); }),
              HasSubstr("clip_by_global_norm: norm must be a tensor of its own, not a part of grads"));
  EXPECT_THAT(error_of([&] { clip_by_global_norm(c, grads, NAN, norm); }),
              HasSubstr("clip_by_global_norm: max_norm must be finite"));
}

}  // namespace
}  // namespace fp8kit::ops
