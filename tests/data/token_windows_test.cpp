// Token windows: documents joined with the separator; every window's targets are its inputs shifted
// by one; an epoch visits every window once, in a seeded order that another epoch or seed changes;
// the same (seed, index) always gives the same window; too short a corpus is refused.
#include "data/token_windows.h"

#include "base/error.h"

#include <gtest/gtest.h>

#include <numeric>
#include <set>
#include <vector>

namespace fp8kit::data {
namespace {

TEST(TokenWindows, JoinsDocumentsWithTheSeparator) {
  const std::vector<std::vector<int32_t>> docs = {{1, 2}, {}, {3}};
  EXPECT_EQ(join_documents(docs, 0), (std::vector<int32_t>{1, 2, 0, 0, 3, 0}));
}

TEST(TokenWindows, EpochsVisitEveryWindowOnceInASeededOrder) {
  std::vector<int32_t> stream(1001);
  std::iota(stream.begin(), stream.end(), 0);
  const TokenWindows w(stream, 10, 5);
  ASSERT_EQ(w.count(), 100);
  std::vector<int32_t> first, second;
  for (int64_t epoch = 0; epoch < 2; ++epoch) {
    std::set<int32_t> starts;
    for (int64_t i = 0; i < w.count(); ++i) {
      std::vector<int32_t> in, next;
      w.window(epoch * w.count() + i, in, next);
      ASSERT_EQ(in.size(), 10u);
      for (size_t t = 0; t < in.size(); ++t) EXPECT_EQ(next[t], in[t] + 1);
      EXPECT_EQ(in[0] % 10, 0);
      starts.insert(in[0]);
      (epoch == 0 ? first : second).push_back(in[0]);
    }
    EXPECT_EQ(starts.size(), 100u);
  }
  EXPECT_NE(first, second);
  // Random access gives the same windows as the sequence (resume), and another seed another order.
  std::vector<int32_t> in, next;
  w.window(42, in, next);
  EXPECT_EQ(in[0], first[42]);
  const TokenWindows other(stream, 10, 6);
  in.clear();
  other.window(0, in, next);
  std::vector<int32_t> in2;
  for (int64_t i = 0; i < 5; ++i) other.window(i, in2, next);
  EXPECT_FALSE(std::equal(first.begin(), first.begin() + 5, std::vector<int32_t>{in2[0], in2[10], in2[20], in2[30], in2[40]}.begin()));
}

TEST(TokenWindows, RefusesACorpusShorterThanAWindow) {
  const std::vector<int32_t> stream(10, 1);
  EXPECT_THROW(TokenWindows(stream, 10, 0), Error);
  EXPECT_NO_THROW(TokenWindows(stream, 9, 0));
}

}  // namespace
}  // namespace fp8kit::data
