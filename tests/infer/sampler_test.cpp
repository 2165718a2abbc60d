// Sampler: greedy picks the argmax; top-k and top-p restrict the draws to the expected sets; the
// draws follow the softmax with temperature; the same seed gives the same tokens; bad options and NaN
// logits are refused.
#include "infer/sampler.h"

#include "base/error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

namespace fp8kit::infer {
namespace {

TEST(Sampler, GreedyTakesTheArgmax) {
  Sampler s({});
  const std::vector<float> logits = {0.1f, 3.0f, -2.0f, 2.9f};
  EXPECT_EQ(s.next(logits), 1);
}

TEST(Sampler, TopKAndTopPRestrictTheCandidates) {
  const std::vector<float> logits = {2.0f, 1.0f, 0.0f, -1.0f, 3.0f};
  Sampler k2({.temperature = 1.0f, .top_k = 2, .seed = 1});
  Sampler p({.temperature = 1.0f, .top_p = 0.5f, .seed = 2});  // id 4 alone holds ~0.64 of the mass
  for (int i = 0; i < 500; ++i) {
    const int32_t a = k2.next(logits);
    EXPECT_TRUE(a == 4 || a == 0) << a;
    EXPECT_EQ(p.next(logits), 4);
  }
}

TEST(Sampler, DrawsFollowTheSoftmaxAndRepeatWithTheSeed) {
  const std::vector<float> logits = {0.0f, std::log(3.0f)};  // p = 1/4, 3/4 at temperature 1
  Sampler a({.temperature = 1.0f, .seed = 7}), b({.temperature = 1.0f, .seed = 7});
  int ones = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    const int32_t x = a.next(logits);
    EXPECT_EQ(x, b.next(logits));
    ones += x;
  }
  EXPECT_NEAR(static_cast<double>(ones) / n, 0.75, 0.02);
}

TEST(Sampler, RefusesBadOptionsAndNaN) {
  EXPECT_THROW(Sampler({.temperature = -1.0f}), Error);
  EXPECT_THROW(Sampler({.top_p = 0.0f}), Error);
  EXPECT_THROW(Sampler({.top_k = -1}), Error);
  Sampler s({});
  const std::vector<float> bad = {0.0f, NAN};
  EXPECT_THROW(s.next(bad), Error);
}

}  // namespace
}  // namespace fp8kit::infer
