// Seeded per-epoch batch orders.
#include "data/batcher.h"

#include "base/error.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

namespace fp8kit::data {
namespace {

bool is_permutation_of_range(std::vector<int64_t> v) {
  std::sort(v.begin(), v.end());
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != static_cast<int64_t>(i)) return false;
  }
  return true;
}

TEST(EpochOrder, IsASeededPermutation) {
  const auto a = epoch_order(1000, 7, 0);
  EXPECT_TRUE(is_permutation_of_range(a));
  EXPECT_EQ(a, epoch_order(1000, 7, 0));  // reproducible
  EXPECT_NE(a, epoch_order(1000, 7, 1));  // differs per epoch
  EXPECT_NE(a, epoch_order(1000, 8, 0));  // and per seed
  std::vector<int64_t> identity(1000);
  std::iota(identity.begin(), identity.end(), 0);
  EXPECT_NE(a, identity);
  EXPECT_TRUE(epoch_order(0, 1, 0).empty());
}

TEST(Batcher, CoversEveryExampleOncePerEpoch) {
  Batcher batcher(70, 32, 42);
  EXPECT_EQ(batcher.num_batches(), 3);
  for (int epoch = 0; epoch < 2; ++epoch) {
    batcher.start_epoch(epoch);
    std::vector<int64_t> seen;
    for (int64_t b = 0; b < batcher.num_batches(); ++b) {
      const auto batch = batcher.batch(b);
      EXPECT_EQ(batch.size(), b < 2 ? 32u : 6u);  // the last batch is smaller
      seen.insert(seen.end(), batch.begin(), batch.end());
    }
    EXPECT_TRUE(is_permutation_of_range(seen));
    EXPECT_EQ(seen, epoch_order(70, 42, epoch));
  }
  EXPECT_THROW(batcher.batch(3), Error);
}

TEST(Batcher, WithoutShuffleKeepsOrder) {
  Batcher batcher(5, 2, 1, /*shuffle=*/false);
  batcher.start_epoch(3);
  EXPECT_THAT(std::vector<int64_t>(batcher.batch(2).begin(), batcher.batch(2).end()), ::testing::ElementsAre(4));
  EXPECT_THROW(Batcher(5, 0, 1), Error);
}

TEST(GatherRows, CopiesTheBatchRows) {
  const std::vector<int32_t> ids = {0, 1, 10, 11, 20, 21};  // [3, 2]
  const std::vector<int64_t> rows = {2, 0};
  std::vector<int32_t> out(4);
  gather_rows<int32_t>(ids, 2, rows, out);
  EXPECT_THAT(out, ::testing::ElementsAre(20, 21, 0, 1));
  const std::vector<int64_t> bad = {3, 0};
  EXPECT_THROW(gather_rows<int32_t>(ids, 2, bad, out), Error);
}

}  // namespace
}  // namespace fp8kit::data
