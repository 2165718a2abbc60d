// Softmax cross-entropy: losses and gradients against a double reference at GPT-2's vocabulary
// (50257, odd), a one-column vocabulary and shifted logits (1e4: the max is subtracted); ignored rows
// (negative targets: loss 0, zero gradient); the gradient by finite differences of the scaled loss;
// in place (dlogits = logits) and forward-only with the same bits; the argument errors.
#include "ops/cross_entropy.h"

#include "common/error_of.h"
#include "common/gradient_check.h"
#include "common/host_tensors.h"
#include "cpu_op_test.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace fp8kit::ops {
namespace {

Tensor ids(const std::vector<int32_t>& values) {
  Tensor t({static_cast<int64_t>(values.size())}, DType::I32);
  std::memcpy(t.data<int32_t>(), values.data(), values.size() * sizeof(int32_t));
  return t;
}

struct Case {
  int64_t vocab;
  std::vector<int32_t> targets;
  float offset;  // added to every logit
};

TEST(CrossEntropy, MatchesReference) {
  const Case cases[] = {{50257, {0, 50256, -1, 17, -100}, 0.0f}, {1, {0, -1, 0}, 0.0f}, {300, {5, 299}, 1e4f}};
  for (const Case& s : cases) {
    const int64_t rows = static_cast<int64_t>(s.targets.size());
    std::vector<float> logits = testing::random_vector(rows * s.vocab, 1, -8, 8);
    for (float& l : logits) l += s.offset;
    const float scale = 1.0f / 3.0f;
    Context c;
    const Tensor lt = testing::host_tensor(logits, {rows, s.vocab});
    Tensor losses, d;
    cross_entropy(c, lt, ids(s.targets), scale, losses, &d);
    for (int64_t r = 0; r < rows; ++r) {
      const float* l = logits.data() + r * s.vocab;
      const float* dr = d.data<float>() + r * s.vocab;
      const int32_t t = s.targets[r];
      if (t < 0) {
        EXPECT_EQ(losses.data<float>()[r], 0.0f);
        for (int64_t i = 0; i < s.vocab; ++i) ASSERT_EQ(dr[i], 0.0f);
        continue;
      }
      double m = l[0], sum = 0;
      for (int64_t i = 0; i < s.vocab; ++i) m = std::max(m, static_cast<double>(l[i]));
      for (int64_t i = 0; i < s.vocab; ++i) sum += std::exp(l[i] - m);
      EXPECT_NEAR(losses.data<float>()[r], std::log(sum) - (l[t] - m), 1e-5) << "vocab " << s.vocab << " row " << r;
      for (int64_t i = 0; i < s.vocab; ++i) {
        const double want = (std::exp(l[i] - m) / sum - (i == t ? 1.0 : 0.0)) * scale;
        ASSERT_NEAR(dr[i], want, 1e-7 + 1e-5 * std::abs(want)) << "vocab " << s.vocab << " row " << r << " col " << i;
      }
    }
  }
}

TEST(CrossEntropy, GradientMatchesFiniteDifferences) {
  const int64_t rows = 4, vocab = 11;
  const std::vector<int32_t> targets{3, -1, 0, 10};
  auto logits = testing::random_vector(rows * vocab, 2, -3, 3);
  const float scale = 0.25f;
  Context c;
  auto loss = [&] {
    Tensor losses;
    cross_entropy(c, testing::host_tensor(logits, {rows, vocab}), ids(targets), scale, losses, nullptr);
    double total = 0;
    for (const float l : losses.span<float>()) total += l;
    return total * scale;
  };
  Tensor losses, d;
  cross_entropy(c, testing::host_tensor(logits, {rows, vocab}), ids(targets), scale, losses, &d);
  const std::vector<float> analytic(d.span<float>().begin(), d.span<float>().end());
  testing::expect_gradient_close(logits, analytic, loss, 1e-2, 1e-5, 1e-3, "dlogits");
}

TEST(CrossEntropy, InPlaceAndForwardOnlyGiveTheSameBits) {
  const int64_t rows = 70, vocab = 1003;  // threaded
  std::vector<int32_t> targets(rows);
  for (int64_t r = 0; r < rows; ++r) targets[r] = r % 7 == 0 ? -1 : static_cast<int32_t>(r * 13 % vocab);
  const auto logits = testing::random_vector(rows * vocab, 3, -5, 5);
  Context c;
  Tensor losses, d, forward_losses;
  const Tensor t = ids(targets);
  cross_entropy(c, testing::host_tensor(logits, {rows, vocab}), t, 0.5f, losses, &d);
  Tensor in_place = testing::host_tensor(logits, {rows, vocab});
  Tensor in_place_losses;
  cross_entropy(c, in_place, t, 0.5f, in_place_losses, &in_place);
  cross_entropy(c, testing::host_tensor(logits, {rows, vocab}), t, 0.5f, forward_losses, nullptr);
  EXPECT_TRUE(testing::same_bits(in_place.span<float>(), d.span<float>()));
  EXPECT_TRUE(testing::same_bits(in_place_losses.span<float>(), losses.span<float>()));
  EXPECT_TRUE(testing::same_bits(forward_losses.span<float>(), losses.span<float>()));
}

TEST(CrossEntropyOp, ErrorsNameTheOpTheTensorAndTheFix) {
  using testing::error_of;
  using ::testing::HasSubstr;
  Context c;
  Tensor logits({2, 5}, DType::F32), logits3({1, 2, 5}, DType::F32), losses, d;
  EXPECT_THAT(error_of([&] {
                cross_entropy(c, logits3, ids({0, 1}), 1.0f, losses, &d);
              }),
              HasSubstr("cross_entropy: logits must be [rows, vocab] with vocab >= 1, got [1, 2, 5]"));
  EXPECT_THAT(error_of([&] {
                cross_entropy(c, logits, ids({0, 1, 2}), 1.0f, losses, &d);
              }),
              HasSubstr("cross_entropy: targets (one per row of logits) must be [2], got [3]"));
  EXPECT_THAT(error_of([&] {
                cross_entropy(c, logits, ids({0, 5}), 1.0f, losses, &d);
              }),
              HasSubstr("cross_entropy: target 5 of row 1 is outside the vocabulary [0, 5) of the logits"));
}

}  // namespace
}  // namespace fp8kit::ops
