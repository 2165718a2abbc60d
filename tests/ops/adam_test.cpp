// adam_step on Tensors (CPU): the same bits as the update core (adam_coefficients + adam_update) over
// the same values, for sizes that take the scalar tail, the AVX2 lanes and the threaded chunks, with and
// without AdamW's weight decay and the learning-rate schedule; without them, Keras's coefficients
// exactly; the schedule's values; the iteration count in its tensor; and the argument errors.
#include "ops/adam.h"

#include "common/error_of.h"
#include "common/gradient_check.h"
#include "common/host_tensors.h"
#include "ops/context.h"
#include "tensor/tensor.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace fp8kit::ops {
namespace {

bool same_bits(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size_bytes()) == 0;
}

AdamOptions scheduled_with_decay() {
  AdamOptions o{3e-3f, 0.85f, 0.995f, 1e-6f};
  o.weight_decay = 0.1f;
  o.warmup_steps = 2;
  o.decay_steps = 5;
  return o;
}

TEST(AdamOp, GivesTheCoresBits) {
  for (const AdamOptions options : {AdamOptions{3e-3f, 0.85f, 0.995f, 1e-6f}, scheduled_with_decay()})
    for (const int64_t n : {1, 13, 1000, 100003}) {
      std::vector<float> want_w = testing::random_vector(n, 1), want_m(n), want_v(n);
      Context c;
      Tensor w = testing::host_tensor(want_w, {n}), g({n}, DType::F32), m({n}, DType::F32), v({n}, DType::F32);
      Tensor iterations({1}, DType::F32);
      for (int step = 0; step < 3; ++step) {
        const std::vector<float> grad =
            testing::random_vector(n, 10 + step, step == 1 ? -1e-6f : -1.0f, step == 1 ? 1e-6f : 1.0f);
        std::memcpy(g.data<float>(), grad.data(), n * sizeof(float));
        adam_update(adam_coefficients(options, static_cast<float>(step + 1)), want_w.data(), grad.data(), want_m.data(),
                    want_v.data(), n);
        adam_step(c, options, iterations, w, g, m, v);
        EXPECT_TRUE(same_bits(w.span<float>(), want_w)) << "n " << n << " step " << step;
        EXPECT_TRUE(same_bits(m.span<float>(), want_m)) << "n " << n << " step " << step;
        EXPECT_TRUE(same_bits(v.span<float>(), want_v)) << "n " << n << " step " << step;
        EXPECT_EQ(iterations.data<float>()[0], static_cast<float>(step + 1));
      }
    }
}

TEST(Adam, WithoutDecayOrScheduleTheCoefficientsAreKerass) {
  const AdamOptions options{3e-3f, 0.85f, 0.995f, 1e-6f};
  for (const float t : {1.0f, 2.0f, 1000.0f}) {
    const AdamCoefficients k = adam_coefficients(options, t);
    const float alpha =
        options.learning_rate * std::sqrt(1.0f - std::pow(options.beta2, t)) / (1.0f - std::pow(options.beta1, t));
    EXPECT_EQ(k.alpha, alpha) << t;
    EXPECT_EQ(k.decay, 1.0f) << t;
    EXPECT_EQ(scheduled_learning_rate(options, t), static_cast<double>(options.learning_rate));
  }
}

TEST(Adam, ScheduleWarmsUpLinearlyThenFollowsACosine) {
  AdamOptions o;
  o.learning_rate = 0.5f;
  o.warmup_steps = 4;
  o.decay_steps = 14;
  o.min_lr_ratio = 0.2f;
  EXPECT_DOUBLE_EQ(scheduled_learning_rate(o, 1), 0.125);
  EXPECT_DOUBLE_EQ(scheduled_learning_rate(o, 4), 0.5);
  const double r = o.min_lr_ratio;  // 0.2f as a double
  EXPECT_DOUBLE_EQ(scheduled_learning_rate(o, 9), 0.5 * (r + (1 - r) * 0.5));  // half way: cos(pi / 2) = 0
  EXPECT_DOUBLE_EQ(scheduled_learning_rate(o, 14), 0.5 * r);
  EXPECT_DOUBLE_EQ(scheduled_learning_rate(o, 1000), 0.5 * r);
  o.decay_steps = 0;  // constant after the warmup
  EXPECT_DOUBLE_EQ(scheduled_learning_rate(o, 2), 0.25);
  EXPECT_DOUBLE_EQ(scheduled_learning_rate(o, 1000), 0.5);
}

TEST(AdamOp, WeightDecayIsDecoupledAndUsesTheScheduledRate) {
  // A zero gradient leaves m and v at 0, so the Adam step is 0: w only decays, by 1 - lr_t wd.
  AdamOptions o;
  o.learning_rate = 0.01f;
  o.weight_decay = 0.5f;
  o.warmup_steps = 4;
  Context c;
  const std::vector<float> start = testing::random_vector(20, 3);
  Tensor w = testing::host_tensor(start, {20}), g({20}, DType::F32), m({20}, DType::F32), v({20}, DType::F32),
         it({1}, DType::F32);
  adam_step(c, o, it, w, g, m, v);
  const float factor = std::fma(-0.0025f, 0.5f, 1.0f);  // lr_1 = 0.01 / 4
  for (int i = 0; i < 20; ++i) EXPECT_EQ(w.data<float>()[i], start[i] * factor) << i;
}

TEST(AdamOp, OnlyElementsBeforeDecayedEndDecay) {
  AdamOptions o;
  o.learning_rate = 0.01f;
  o.weight_decay = 0.5f;
  Context c;
  const std::vector<float> start = testing::random_vector(20, 4);
  Tensor w = testing::host_tensor(start, {20}), g({20}, DType::F32), m({20}, DType::F32), v({20}, DType::F32),
         it({1}, DType::F32);
  adam_step(c, o, it, w, g, m, v, false, 7);
  const float factor = std::fma(-0.01f, 0.5f, 1.0f);
  for (int i = 0; i < 20; ++i) EXPECT_EQ(w.data<float>()[i], i < 7 ? start[i] * factor : start[i]) << i;
  EXPECT_THAT(testing::error_of([&] { adam_step(c, o, it, w, g, m, v, false, 21); }),
              ::testing::HasSubstr("decayed_end 21 is past"));
}

TEST(AdamOp, ErrorsNameTheOpTheTensorAndTheFix) {
  using testing::error_of;
  using ::testing::HasSubstr;
  Context c;
  Tensor w({4}, DType::F32), g({4}, DType::F32), m({4}, DType::F32), v({4}, DType::F32), it({1}, DType::F32);
  Tensor short_g({3}, DType::F32), wide_it({2}, DType::F32), bf16_v({4}, DType::Bf16);
  EXPECT_THAT(error_of([&] { adam_step(c, {}, it, w, short_g, m, v); }),
              HasSubstr("adam_step: g (w's shape) must be [4], got [3]"));
  EXPECT_THAT(error_of([&] { adam_step(c, {}, wide_it, w, g, m, v); }),
              HasSubstr("adam_step: iterations must be [1], got [2]"));
  EXPECT_THAT(error_of([&] { adam_step(c, {}, it, w, g, m, bf16_v); }),
              HasSubstr("adam_step: v (w's shape) must be f32, got bf16"));
  EXPECT_THAT(error_of([&] { adam_step(c, {1e-3f, 1.0f}, it, w, g, m, v); }),
              HasSubstr("Adam betas must be in [0, 1), got 1 and 0.999"));
  AdamOptions bad;
  bad.weight_decay = -1.0f;
  EXPECT_THAT(error_of([&] { adam_step(c, bad, it, w, g, m, v); }),
              HasSubstr("weight decay must be a finite value >= 0, got -1"));
  bad = {};
  bad.warmup_steps = 10;
  bad.decay_steps = 10;
  EXPECT_THAT(error_of([&] { adam_step(c, bad, it, w, g, m, v); }),
              HasSubstr("decay steps must be 0 (no decay) or more than the warmup steps (10), got 10"));
  bad = {};
  bad.min_lr_ratio = 1.5f;
  EXPECT_THAT(error_of([&] { adam_step(c, bad, it, w, g, m, v); }),
              HasSubstr("the minimum learning-rate ratio must be in [0, 1], got 1.5"));
  EXPECT_EQ(it.data<float>()[0], 0.0f);  // nothing ran
}

}  // namespace
}  // namespace fp8kit::ops
