// Mean pooling: the CPU core's values; the op on Tensors: the bits of the seed model's CPU path (the
// core, which nn::mean_pool_forward names, then the dropout span functions, nn::Dropout's; backward the
// other way round) with the dropout active and inactive, f32 and bf16, awkward shapes; and its
// argument errors.
#include "ops/mean_pool.h"

#include "common/error_of.h"
#include "common/gradient_check.h"
#include "cpu_op_test.h"
#include "ops/cpu/mean_pool.h"

#include <gtest/gtest.h>

#include <vector>

namespace fp8kit::ops {
namespace {

TEST(MeanPool, AveragesOverTheSequence) {
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};  // batch 1, seq 3, dim 2
  std::vector<float> out(2), dx(6);
  cpu::mean_pool_forward(x, 1, 3, 2, false, out);
  EXPECT_EQ(out, (std::vector<float>{3, 4}));
  cpu::mean_pool_backward(std::vector<float>{3, 6}, 1, 3, 2, dx);
  EXPECT_EQ(dx, (std::vector<float>{1, 2, 1, 2, 1, 2}));
}

TEST(MeanPoolOp, MatchesTheModelsPathBitForBit) {
  struct Case {
    int64_t batch, seq, dim;
  };
  for (const Case s : {Case{4, 9, 5}, Case{1, 1, 1}, Case{3, 200, 33}}) {
    const auto x = testing::random_vector(s.batch * s.seq * s.dim, 1, -2, 2);
    const auto dout = testing::random_vector(s.batch * s.dim, 2);
    Context c(Device::Cpu, 7);
    c.set_step(5);
    for (const bool bf16 : {false, true}) {
      for (const bool training : {false, true}) {
        std::vector<float> want(s.batch * s.dim), dropped = dout, want_dx(x.size());
        cpu::mean_pool_forward(x, s.batch, s.seq, s.dim, bf16, want);
        if (training) {
          const DropoutMask mask(7, 5, 3, 0.2f);
          dropout_forward(mask, 0.2f, bf16, want, want);
          dropout_backward(mask, 0.2f, bf16, dout, dropped);
        }
        cpu::mean_pool_backward(dropped, s.batch, s.seq, s.dim, want_dx);

        const DropoutSpec spec{3, 0.2f, training};
        Tensor out, dx;
        mean_pool_forward(c, testing::host_tensor(x, {s.batch, s.seq, s.dim}), bf16, spec, out);
        EXPECT_EQ(out.shape(), (std::vector<int64_t>{s.batch, s.dim}));
        EXPECT_TRUE(testing::same_bits(out.span<float>(), want)) << "bf16 " << bf16 << " training " << training;
        mean_pool_backward(c, testing::host_tensor(dout, {s.batch, s.dim}), s.seq, bf16, spec, dx);
        EXPECT_EQ(dx.shape(), (std::vector<int64_t>{s.batch, s.seq, s.dim}));
        EXPECT_TRUE(testing::same_bits(dx.span<float>(), want_dx)) << "bf16 " << bf16 << " training " << training;
      }
    }
  }
}

TEST(MeanPoolOp, ErrorsNameTheOpAndTheTensor) {
  Context c;
  const Tensor x2({4, 8}, DType::F32), no_seq({4, 0, 8}, DType::F32), dout({4, 8}, DType::F32),
      dout3({4, 1, 8}, DType::F32);
  Tensor out, dx;
  EXPECT_EQ(testing::error_of([&] { mean_pool_forward(c, x2, false, {}, out); }),
            "mean_pool_forward: x must be [batch, seq, dim] with seq >= 1, got [4, 8]");
  EXPECT_EQ(testing::error_of([&] { mean_pool_forward(c, no_seq, false, {}, out); }),
            "mean_pool_forward: x must be [batch, seq, dim] with seq >= 1, got [4, 0, 8]");
  EXPECT_EQ(testing::error_of([&] { mean_pool_backward(c, dout, 0, false, {}, dx); }),
            "mean_pool_backward: seq must be at least 1, got 0");
  EXPECT_EQ(testing::error_of([&] { mean_pool_backward(c, dout3, 2, false, {}, dx); }),
            "mean_pool_backward: dout must be [batch, dim], got [4, 1, 8]");
  EXPECT_EQ(testing::error_of([&] { mean_pool_backward(c, dout, 2, false, {0, -0.5f, true}, dx); }),
            "mean_pool_backward: the dropout rate of site 0 must be in [0, 1), got -0.5");
}

}  // namespace
}  // namespace fp8kit::ops
