// Greedy sampling: the first index of each row's maximum, NaN never winning (a row of NaN gives 0),
// -inf rows, ties, f32 and bf16; the argument errors.
#include "ops/sampling.h"

#include "common/error_of.h"
#include "common/gradient_check.h"
#include "cpu_op_test.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <limits>
#include <vector>

namespace fp8kit::ops {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN(), kInf = std::numeric_limits<float>::infinity();

TEST(ArgmaxRows, FirstMaximumNaNNeverWins) {
  const std::vector<float> logits = {
      1, 3, 2, 3,             // tie: the first
      kNaN, -1, kNaN, -2,     // NaN skipped
      kNaN, kNaN, kNaN, kNaN, // all NaN: 0
      -kInf, -kInf, -kInf, -kInf,  // all -inf: the first
      -0.0f, 0.0f, -1, -kInf,  // -0 == 0: the first
      kNaN, 5, kInf, kInf,    // inf wins, the first
  };
  const std::vector<int32_t> want = {1, 1, 0, 0, 0, 2};
  for (const DType dtype : {DType::F32, DType::Bf16}) {
    Context c;
    Tensor ids;
    argmax_rows(c, testing::host_tensor(logits, {6, 4}, dtype), ids);
    EXPECT_EQ(ids.dtype(), DType::I32);
    EXPECT_EQ(std::vector<int32_t>(ids.span<int32_t>().begin(), ids.span<int32_t>().end()), want) << name(dtype);
  }
}

TEST(ArgmaxRows, MatchesALoopOnRandomRows) {
  const int64_t rows = 40, n = 3001;
  const auto logits = testing::random_vector(rows * n, 9, -20, 20);
  Context c;
  Tensor ids;
  argmax_rows(c, testing::host_tensor(logits, {rows, n}), ids);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
      if (logits[r * n + i] > logits[r * n + best]) best = i;
    EXPECT_EQ(ids.data<int32_t>()[r], best) << r;
  }
}

TEST(ArgmaxRows, ErrorsNameTheOpTheTensorAndTheFix) {
  using testing::error_of;
  using ::testing::HasSubstr;
  Context c;
  Tensor ints({2, 3}, DType::I32), ids;
  EXPECT_THAT(error_of([&] { argmax_rows(c, ints, ids); }),
              HasSubstr("argmax_rows: logits must be [rows, n] f32 or bf16, got i32 [2, 3]"));
}

}  // namespace
}  // namespace fp8kit::ops
