// Counter-based dropout masks: determined by (seed, step, site, index) alone, independent across
// steps and sites, keep rate 1 - rate; Keras's scaling of kept elements in float32 and bf16. The op
// on Tensors: the bits of the span functions (nn::Dropout's) with the mask of the context's seed and
// step, a copy when inactive, in place, a new mask each step; and its argument errors.
#include "ops/dropout.h"

#include "common/error_of.h"
#include "cpu_op_test.h"
#include "numerics/cast.h"
#include "ops/context.h"

#include <gtest/gtest.h>

#include <vector>

namespace fp8kit::ops {
namespace {

TEST(DropoutMask, DependsOnlyOnSeedStepSiteAndIndex) {
  const DropoutMask a(42, 7, 3, 0.1f), b(42, 7, 3, 0.1f);
  const DropoutMask other_step(42, 8, 3, 0.1f), other_site(42, 7, 4, 0.1f), other_seed(43, 7, 3, 0.1f);
  int same = 0, diff_step = 0, diff_site = 0, diff_seed = 0;
  const int n = 100000;
  for (uint32_t i = 0; i < n; ++i) {
    same += a.keep(i) == b.keep(i);
    diff_step += a.keep(i) != other_step.keep(i);
    diff_site += a.keep(i) != other_site.keep(i);
    diff_seed += a.keep(i) != other_seed.keep(i);
  }
  EXPECT_EQ(same, n);
  // Independent masks with keep 0.9 disagree on 2 * 0.9 * 0.1 = 18% of the elements.
  for (int d : {diff_step, diff_site, diff_seed}) EXPECT_NEAR(d / double(n), 0.18, 0.01);
}

TEST(DropoutMask, KeepsWithProbabilityOneMinusRate) {
  for (float rate : {0.1f, 0.5f}) {
    const DropoutMask m(1, 0, 0, rate);
    const int n = 1 << 20;
    int kept = 0;
    for (uint32_t i = 0; i < n; ++i) kept += m.keep(i);
    EXPECT_NEAR(kept / double(n), 1.0 - rate, 0.002) << rate;
  }
  const DropoutMask none(1, 0, 0, 0.0f);
  for (uint32_t i = 0; i < 1000; ++i) EXPECT_TRUE(none.keep(i));
}

TEST(Dropout, ScalesKeptElementsLikeKeras) {
  const DropoutMask m(5, 1, 2, 0.1f);
  std::vector<float> x(1000), y(1000), y16(1000), dx(1000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = round_bf16(0.01f * static_cast<float>(i) - 3.0f);
  dropout_forward(m, 0.1f, false, x, y);
  dropout_forward(m, 0.1f, true, x, y16);
  EXPECT_EQ(dropout_keep_prob(0.1f, true), 0.8984375f);  // bf16(0.9)
  for (size_t i = 0; i < x.size(); ++i) {
    const bool keep = m.keep(static_cast<uint32_t>(i));
    EXPECT_EQ(y[i], keep ? x[i] / 0.9f : 0.0f) << i;
    EXPECT_EQ(y16[i], keep ? round_bf16(x[i] / 0.8984375f) : 0.0f) << i;
  }
  dropout_backward(m, 0.1f, false, x, dx);
  for (size_t i = 0; i < x.size(); ++i) EXPECT_EQ(dx[i], y[i]) << i;
}

TEST(DropoutOp, MatchesTheSpanFunctionsBitForBit) {
  std::vector<float> x(3 * 5 * 7);
  for (size_t i = 0; i < x.size(); ++i) x[i] = round_bf16(0.37f * static_cast<float>(i) - 11.0f);
  Context c(Device::Cpu, 42);
  c.set_step(9);
  const Tensor tx = testing::host_tensor(x, {3, 5, 7});
  for (const bool bf16 : {false, true}) {
    for (const bool training : {false, true}) {
      std::vector<float> want = x, want_dx = x;
      if (training) {
        const DropoutMask mask(42, 9, 4, 0.25f);
        dropout_forward(mask, 0.25f, bf16, x, want);
        dropout_backward(mask, 0.25f, bf16, x, want_dx);
      }
      const DropoutSpec spec{4, 0.25f, training};
      Tensor out, dx;
      dropout_forward(c, tx, bf16, spec, out);
      EXPECT_EQ(out.shape(), tx.shape());
      EXPECT_TRUE(testing::same_bits(out.span<float>(), want)) << "bf16 " << bf16 << " training " << training;
      dropout_backward(c, tx, bf16, spec, dx);
      EXPECT_TRUE(testing::same_bits(dx.span<float>(), want_dx)) << "bf16 " << bf16 << " training " << training;
      Tensor in_place = tx.clone();
      dropout_forward(c, in_place, bf16, spec, in_place);
      EXPECT_TRUE(testing::same_bits(in_place.span<float>(), want));
    }
  }
  // Rate 0 drops nothing even when active.
  Tensor out;
  dropout_forward(c, tx, false, {4, 0.0f, true}, out);
  EXPECT_TRUE(testing::same_bits(out.span<float>(), x));
}

TEST(DropoutOp, DrawsANewMaskEachStep) {
  Context c(Device::Cpu, 1);
  const Tensor x = testing::host_tensor(std::vector<float>(1000, 1.0f), {1000});
  Tensor step0, again, step1;
  dropout_forward(c, x, false, {2, 0.1f, true}, step0);
  dropout_forward(c, x, false, {2, 0.1f, true}, again);
  c.advance_step();
  dropout_forward(c, x, false, {2, 0.1f, true}, step1);
  EXPECT_TRUE(testing::same_bits(step0.span<float>(), again.span<float>()));
  EXPECT_FALSE(testing::same_bits(step0.span<float>(), step1.span<float>()));
}

TEST(DropoutOp, ErrorsNameTheOpAndTheTensor) {
  Context c;
  const Tensor x16({4}, DType::Bf16), x({4}, DType::F32);
  Tensor out, wrong({4}, DType::I32);
  EXPECT_EQ(testing::error_of([&] { dropout_forward(c, x16, false, {1, 0.1f, true}, out); }),
            "dropout_forward: x must be f32, got bf16");
  EXPECT_EQ(testing::error_of([&] { dropout_backward(c, x, false, {1, 0.1f, true}, wrong); }),
            "dropout_backward: dx must be f32 on the cpu, got i32 on the cpu");
  EXPECT_EQ(testing::error_of([&] { dropout_forward(c, x, false, {2, 1.0f, true}, out); }),
            "dropout_forward: the dropout rate of site 2 must be in [0, 1), got 1");
}

}  // namespace
}  // namespace fp8kit::ops
