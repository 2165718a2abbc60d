// linear_finish into bf16 copies (a biased projection's SDPA operand) on the GPU: one pass from the
// deferred GEMM output, against linear_finish in place and then convert on the same GPU (the same
// GEMM sums): the same bits, GELU's pre-activation and ReLU's activated y included.
#include "ops/cuda/gpu_test.h"
#include "ops/cuda/linear_pair.h"
#include "ops/cuda/op_table.h"
#include "ops/elementwise.h"
#include "ops/linear.h"

#include <gtest/gtest.h>

#include <string>

namespace fp8kit::ops {
namespace {

struct Shape {
  int64_t rows, in, out;
};

struct Outputs {
  std::vector<Tensor> copies;  // the two Linears' bf16 outputs
  std::vector<Tensor> kept;    // what their backwards read: GELU's pre, ReLU's y
};

// Two Linears of x (precision p, activation act), outputs deferred, finished into bf16 copies in one
// pass (fused) or in place and then converted.
Outputs run(const Shape& s, LinearPrecision p, Activation act, bool fused) {
  Context c(Device::Cuda);
  const Tensor x = testing::device_tensor(testing::random_values(s.rows * s.in, 61), {s.rows, s.in}, Device::Cuda);
  testing::LinearPair pair(c, s.in, s.out, p, act, true, 62);
  const std::array<LinearOp*, 2>& both = pair.both;
  for (LinearOp* l : both) linear_forward(c, *l, x, true, {.deferred = true});
  Outputs r;
  r.copies.resize(2);
  if (fused) {
    Tensor* outs[] = {&r.copies[0], &r.copies[1]};
    linear_finish(c, both, DType::Bf16, outs);
  } else {
    linear_finish(c, both);
    for (int k = 0; k < 2; ++k) convert(c, both[k]->y, DType::Bf16, r.copies[k]);
  }
  for (LinearOp* l : both) {
    if (act == Activation::Gelu) r.kept.push_back(l->pre.clone());
    if (act == Activation::Relu) r.kept.push_back(l->y.clone());
  }
  c.join_all();
  return r;
}

TEST(CudaLinearFinish, IntoBf16IsFinishThenConvert) {
  FP8KIT_REQUIRE_GPU();
  // The 64 x 64 tiles (rows and columns multiples of 4) and the 32 x 32 ones.
  for (const Shape s : {Shape{128, 64, 96}, Shape{37, 48, 30}})
    for (const LinearPrecision p : {LinearPrecision::Fp32, LinearPrecision::Bf16, LinearPrecision::Fp8})
      for (const Activation act : {Activation::None, Activation::Relu, Activation::Gelu}) {
        const std::string what = std::to_string(s.rows) + "x" + std::to_string(s.in) + "x" + std::to_string(s.out) +
                                 " precision " + std::to_string(static_cast<int>(p)) + " activation " +
                                 std::to_string(static_cast<int>(act));
        const Outputs fused = run(s, p, act, true), reference = run(s, p, act, false);
        for (int k = 0; k < 2; ++k) {
          ASSERT_EQ(fused.copies[k].dtype(), DType::Bf16) << what;
          EXPECT_EQ(fused.copies[k].shape(), (std::vector<int64_t>{s.rows, s.out})) << what;
          EXPECT_EQ(testing::tensor_bits(fused.copies[k]), testing::tensor_bits(reference.copies[k]))
              << what << ", Linear " << k;
        }
        ASSERT_EQ(fused.kept.size(), reference.kept.size());
        for (size_t k = 0; k < fused.kept.size(); ++k)
          EXPECT_EQ(testing::tensor_bits(fused.kept[k]), testing::tensor_bits(reference.kept[k]))
              << what << ", kept " << k;
      }
}

}  // namespace
}  // namespace fp8kit::ops
