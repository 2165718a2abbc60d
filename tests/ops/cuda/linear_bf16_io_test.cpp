// A Linear's bf16 input and output gradient (cuDNN's attention output and gradients, read as they
// are) and its dx written as bf16 (the attention's dout) on the GPU, against the same Linear given
// the same values in f32 on the same GPU: y, dW and db the same bits in every precision (a bf16 value
// is exact in f32, and the casts, GEMMs and bias sums see the same values), dx within one bf16 step
// of the f32 dx rounded (cuBLASLt may pick another kernel for a bf16 output). The shapes take each
// path: the casts' bias sums (1100 x 1024: the bf16 wide tile and FP8's summing tile read bf16),
// bias_backward (96 x 128: dy converted first), and FP8's one-launch quantize + GEMM (33 x 32 x 32:
// x and dy converted, dx made in f32 and rounded; the bf16 cast's narrow tile); and groups whose dy
// are f32 and bf16 side by side (the Llama's key after RoPE's backward and value).
#include "base/error.h"
#include "ops/cuda/gpu_test.h"
#include "ops/cuda/linear_pair.h"
#include "ops/cuda/op_table.h"
#include "ops/elementwise.h"
#include "ops/linear.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <deque>
#include <string>

namespace fp8kit::ops {
namespace {

struct Shape {
  int64_t rows, in, out;
};

struct Outputs {
  std::vector<Tensor> exact;  // y, dW, db of both Linears
  std::vector<Tensor> dx;     // both Linears' dx as bf16
};

// Two Linears of one input (key and value: their backward a group on lanes A and B), forward and
// backward with x and dy in bf16 (bf16_io, dx into bf16 tensors) or the same values in f32; mixed:
// the first one's dy in f32 beside the second's bf16 (the Llama's key after RoPE's backward, and value).
Outputs run(const Shape& s, LinearPrecision p, bool bias, bool bf16_io, bool mixed = false) {
  Context c(Device::Cuda);
  const DType io = bf16_io ? DType::Bf16 : DType::F32;
  // bf16 values either way: device_tensor rounds them for bf16, and they are rounded first for f32.
  const auto rounded = [](std::vector<float> v) {
    for (float& e : v) e = std::bit_cast<float>(std::bit_cast<uint32_t>(e) & 0xFFFF0000u);
    return v;
  };
  const Tensor x = testing::device_tensor(rounded(testing::random_values(s.rows * s.in, 71)), {s.rows, s.in},
                                          Device::Cuda, io);
  testing::LinearPair pair(c, s.in, s.out, p, Activation::None, bias, 72);
  LinearOp &a = pair.a, &b = pair.b;
  std::deque<Tensor>& tensors = pair.params;
  for (LinearOp* l : pair.both) linear_forward(c, *l, x, true);
  Tensor& dy_a = tensors.emplace_back(testing::device_tensor(rounded(testing::random_values(s.rows * s.out, 76)),
                                                             {s.rows, s.out}, Device::Cuda, mixed ? DType::F32 : io));
  Tensor& dy_b = tensors.emplace_back(testing::device_tensor(rounded(testing::random_values(s.rows * s.out, 77)),
                                                             {s.rows, s.out}, Device::Cuda, io));
  Outputs r;
  r.dx.resize(2);
  LinearGradient group[] = {{.linear = &a, .dy = &dy_a, .lane = Lane::A}, {.linear = &b, .dy = &dy_b, .lane = Lane::B}};
  if (bf16_io)
    for (int k = 0; k < 2; ++k) group[k].dx_bf16 = &r.dx[k];
  linear_backward(c, group);
  c.join_all();
  for (LinearOp* l : pair.both) {
    r.exact.push_back(l->y.clone());
    r.exact.push_back(l->dw->clone());
    if (bias) r.exact.push_back(l->db->clone());
  }
  if (!bf16_io)
    for (int k = 0; k < 2; ++k) convert(c, pair.both[k]->dx, DType::Bf16, r.dx[k]);
  c.join_all();
  return r;
}

TEST(CudaLinearBf16Io, Bf16InputAndGradientGiveTheBitsOfTheirValuesInF32) {
  FP8KIT_REQUIRE_GPU();
  for (const Shape s : {Shape{1100, 64, 1024}, Shape{96, 256, 128}, Shape{33, 32, 32}})
    for (const LinearPrecision p :
         {LinearPrecision::Fp32, LinearPrecision::Bf16, LinearPrecision::Fp8, LinearPrecision::Fp8Block})
      for (const bool bias : {true, false})
        for (const bool mixed : {false, true}) {
        const std::string what = std::to_string(s.rows) + "x" + std::to_string(s.in) + "x" + std::to_string(s.out) +
                                 " precision " + std::to_string(static_cast<int>(p)) + (bias ? " biased" : "") +
                                 (mixed ? " mixed" : "");
        const Outputs bf16 = run(s, p, bias, true, mixed), f32 = run(s, p, bias, false);
        ASSERT_EQ(bf16.exact.size(), f32.exact.size());
        for (size_t k = 0; k < bf16.exact.size(); ++k)
          EXPECT_EQ(testing::tensor_bits(bf16.exact[k]), testing::tensor_bits(f32.exact[k]))
              << what << ", output " << k << " (y, dW, db per Linear)";
        for (int k = 0; k < 2; ++k) {
          ASSERT_EQ(bf16.dx[k].dtype(), DType::Bf16) << what;
          ASSERT_EQ(bf16.dx[k].shape(), (std::vector<int64_t>{s.rows, s.in})) << what;
          const std::vector<uint32_t> got = testing::tensor_bits(bf16.dx[k]), want = testing::tensor_bits(f32.dx[k]);
          int far = 0;
          for (size_t i = 0; i < got.size(); ++i) {  // apart by more than the bf16 step at their magnitude
            const float a = std::bit_cast<float>(got[i] << 16), b = std::bit_cast<float>(want[i] << 16);
            const float magnitude = std::max(std::fabs(a), std::fabs(b));
            far += magnitude > 0 && std::fabs(a - b) > std::ldexp(1.0f, std::ilogb(magnitude) - 7);
          }
          EXPECT_EQ(far, 0) << what << ", Linear " << k << ": dx elements more than one bf16 step apart";
        }
      }
}

TEST(CudaLinearBf16Io, InputsSharedOrPreparedAheadMustBeF32) {
  FP8KIT_REQUIRE_GPU();
  Context c(Device::Cuda);
  testing::LinearPair pair(c, 64, 32, LinearPrecision::Bf16, Activation::None, false, 81);
  const Tensor x = testing::device_tensor(testing::random_values(8 * 64, 82), {8, 64}, Device::Cuda, DType::Bf16);
  EXPECT_THROW(linear_prepare_input(c, pair.a, x, true), Error);
  const Tensor i32 = testing::device_ints(std::vector<int32_t>(8 * 64, 1), {8, 64}, Device::Cuda);
  EXPECT_THROW(linear_forward(c, pair.a, i32, true), Error);
}

}  // namespace
}  // namespace fp8kit::ops
