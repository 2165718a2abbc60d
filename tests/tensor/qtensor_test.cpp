// QuantSpec's block extents at every granularity and QTensor's view of its codes as a matrix.
#include "tensor/qtensor.h"

#include <gtest/gtest.h>

namespace fp8kit {
namespace {

TEST(QuantSpec, BlockExtentsFollowTheGranularity) {
  struct Case {
    QuantSpec spec;
    size_t rows, cols;
  };
  const Case cases[] = {
      {{.granularity = Granularity::PerTensor}, 217, 300},
      {{.granularity = Granularity::PerRow}, 1, 300},
      {{.granularity = Granularity::PerGroup, .group = 32}, 1, 32},
      {{.granularity = Granularity::PerGroup, .group = 64}, 1, 64},
      {{.granularity = Granularity::Block1x128}, 1, 128},
      {{.granularity = Granularity::Block128x128}, 128, 128},
  };
  for (const Case& c : cases) {
    const BlockShape b = c.spec.block(217, 300);
    EXPECT_EQ(b.rows, c.rows) << name(c.spec.granularity);
    EXPECT_EQ(b.cols, c.cols) << name(c.spec.granularity);
  }
  const BlockShape empty = QuantSpec{}.block(0, 0);  // one 1 x 1 block: never a zero divisor
  EXPECT_EQ(empty.rows, 1u);
  EXPECT_EQ(empty.cols, 1u);
}

TEST(QTensor, VectorsAreOneRow) {
  QTensor q{Tensor({40}, DType::E4M3), Tensor(), Tensor({1, 2}, DType::F32), Tensor({1, 2}, DType::F32),
            {.granularity = Granularity::PerGroup, .group = 32}};
  EXPECT_EQ(q.rows(), 1);
  EXPECT_EQ(q.cols(), 40);
  EXPECT_EQ(q.block().cols, 32u);
}

}  // namespace
}  // namespace fp8kit
