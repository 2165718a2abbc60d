// fp8_wins_from: the smallest size from which FP8 stays faster, computed from the measured times.
#include "lab/crossover.h"

#include <gtest/gtest.h>

#include <vector>

namespace fp8kit::lab {
namespace {

TEST(Crossover, SmallestSizeFromWhichFp8StaysFaster) {
  const std::vector<double> bf16 = {0.10, 0.20, 0.80, 1.60};
  EXPECT_EQ(fp8_wins_from(bf16, std::vector<double>{0.12, 0.18, 0.50, 1.00}), 1u);
  EXPECT_EQ(fp8_wins_from(bf16, std::vector<double>{0.09, 0.21, 0.50, 1.00}), 2u);  // a win below a loss
  EXPECT_EQ(fp8_wins_from(bf16, std::vector<double>{0.09, 0.10, 0.50, 1.00}), 0u);
  EXPECT_EQ(fp8_wins_from(bf16, std::vector<double>{0.09, 0.10, 0.50, 1.60}), std::nullopt);  // a tie is no win
  EXPECT_EQ(fp8_wins_from(std::vector<double>{}, std::vector<double>{}), std::nullopt);
}

}  // namespace
}  // namespace fp8kit::lab
