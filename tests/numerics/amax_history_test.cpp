// Amax history (amax_history.h): FIFO window, max / most_recent, skip-on-zero.
#include "numerics/amax_history.h"

#include "base/error.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace fp8kit {
namespace {

std::vector<float> slots(const AmaxHistory& h) { return {h.values().begin(), h.values().end()}; }

TEST(AmaxHistory, StartsAtZero) {
  AmaxHistory h(4);
  EXPECT_EQ(h.length(), 4u);
  EXPECT_EQ(slots(h), (std::vector<float>{0, 0, 0, 0}));
  EXPECT_EQ(h.amax(AmaxAlgorithm::Max), 0.0f);
  EXPECT_EQ(h.amax(AmaxAlgorithm::MostRecent), 0.0f);
}

TEST(AmaxHistory, WindowKeepsTheLastLNewestFirst) {
  AmaxHistory h(3);
  h.push(5.0f);
  EXPECT_EQ(slots(h), (std::vector<float>{5, 0, 0}));
  h.push(1.0f);
  h.push(2.0f);
  EXPECT_EQ(slots(h), (std::vector<float>{2, 1, 5}));
  EXPECT_EQ(h.amax(AmaxAlgorithm::Max), 5.0f);
  EXPECT_EQ(h.amax(AmaxAlgorithm::MostRecent), 2.0f);
  h.push(3.0f);  // 5 leaves the window
  EXPECT_EQ(slots(h), (std::vector<float>{3, 2, 1}));
  EXPECT_EQ(h.amax(AmaxAlgorithm::Max), 3.0f);
  EXPECT_EQ(h.amax(AmaxAlgorithm::MostRecent), 3.0f);
}

TEST(AmaxHistory, LengthOne) {
  AmaxHistory h(1);
  h.push(4.0f);
  h.push(2.0f);
  EXPECT_EQ(h.amax(AmaxAlgorithm::Max), 2.0f);
}

TEST(AmaxHistory, SkipZero) {
  AmaxHistory h(3);
  h.push(4.0f);
  h.push(0.0f, /*skip_zero=*/true);
  EXPECT_EQ(slots(h), (std::vector<float>{4, 0, 0}));
  EXPECT_EQ(h.amax(AmaxAlgorithm::MostRecent), 4.0f);
  h.push(0.0f);  // without the flag a zero is an ordinary entry
  EXPECT_EQ(slots(h), (std::vector<float>{0, 4, 0}));
  EXPECT_EQ(h.amax(AmaxAlgorithm::MostRecent), 0.0f);
  EXPECT_EQ(h.amax(AmaxAlgorithm::Max), 4.0f);
}

TEST(AmaxHistory, InfCountsNanPropagates) {
  AmaxHistory h(3);
  h.push(std::numeric_limits<float>::infinity());
  h.push(1.0f);
  EXPECT_EQ(h.amax(AmaxAlgorithm::Max), std::numeric_limits<float>::infinity());
  h.push(std::numeric_limits<float>::quiet_NaN());
  EXPECT_TRUE(std::isnan(h.amax(AmaxAlgorithm::Max)));
}

TEST(AmaxHistory, RestoreThroughValues) {
  AmaxHistory h(2);
  h.values()[0] = 1.5f;
  h.values()[1] = 9.0f;
  EXPECT_EQ(h.amax(AmaxAlgorithm::Max), 9.0f);
  EXPECT_EQ(h.amax(AmaxAlgorithm::MostRecent), 1.5f);
}

TEST(AmaxHistory, ZeroLengthIsAnError) { EXPECT_THROW(AmaxHistory(0), Error); }

}  // namespace
}  // namespace fp8kit
