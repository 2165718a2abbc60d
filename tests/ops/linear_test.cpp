// The Linear op's GELU on the CPU: y = gelu(pre) with pre = x W + b kept (mixed bf16: pre as the ReLU
// path rounds it, y rounded again), a deferred GELU applied by its consumer as its own epilogue would
// (the lab's MLP), SwiGLU's gate deferred into a Linear, a backward without the input gradient giving
// the same weight gradients, bf16 inputs, gradients and dx, and which FP8 Linears share an input's
// cast.
#include "ops/linear.h"

#include "common/error_of.h"
#include "common/gradient_check.h"
#include "cpu_op_test.h"
#include "base/error.h"
#include "numerics/cast.h"
#include "numerics/convert.h"
#include "ops/activation.h"
#include "ops/elementwise.h"
#include "ops/swiglu.h"
#include "ops/tensor_checks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <deque>
#include <vector>

namespace fp8kit::ops {
namespace {

// A Linear [in -> out] stored OutIn with bias, its parameters owned here.
struct Layer {
  Tensor w, b, dw, db;
  LinearOp op;
  Layer(int64_t in, int64_t out, Activation act, LinearPrecision p, uint64_t seed)
      : w(testing::host_tensor(testing::random_vector(out * in, seed, -0.3f, 0.3f), {out, in})),
        b(testing::host_tensor(testing::random_vector(out, seed + 1), {out})),
        dw({out, in}, DType::F32),
        db({out}, DType::F32) {
    op.in = in;
    op.out = out;
    op.layout = LinearOp::Layout::OutIn;
    op.activation = act;
    op.precision = p;
    op.w = &w, op.b = &b, op.dw = &dw, op.db = &db;
  }
};

TEST(LinearGelu, OutputIsGeluOfThePreActivationItKeeps) {
  const int64_t rows = 7, in = 20, out = 9;
  const Tensor x = testing::host_tensor(testing::random_vector(rows * in, 1, -2, 2), {rows, in});
  for (LinearPrecision p : {LinearPrecision::Fp32, LinearPrecision::Bf16}) {
    Context c;
    Layer plain(in, out, Activation::None, p, 2), gelu_layer(in, out, Activation::Gelu, p, 2);
    LinearOp* ops[] = {&plain.op, &gelu_layer.op};
    linear_prepare_weights(c, ops, true);
    linear_forward(c, plain.op, x, true);
    linear_forward(c, gelu_layer.op, x, true);
    const bool bf16 = p == LinearPrecision::Bf16;
    for (int64_t i = 0; i < rows * out; ++i) {
      const float pre = plain.op.y.data<float>()[i];
      ASSERT_EQ(gelu_layer.op.pre.data<float>()[i], pre) << i;
      ASSERT_EQ(gelu_layer.op.y.data<float>()[i], bf16 ? round_bf16(gelu(pre)) : gelu(pre)) << i;
    }
  }
}

// fc1 (GELU, deferred) into fc2, against fc1 applied as it runs: the same outputs and gradients.
TEST(LinearGelu, DeferredIntoTheNextLinearIsTheSame) {
  const int64_t rows = 6, in = 12, hidden = 24, out = 5;
  const Tensor x = testing::host_tensor(testing::random_vector(rows * in, 3, -2, 2), {rows, in});
  const Tensor dy = testing::host_tensor(testing::random_vector(rows * out, 4), {rows, out});
  std::vector<std::vector<float>> results[2];
  for (int deferred = 0; deferred < 2; ++deferred) {
    Context c;
    Layer fc1(in, hidden, Activation::Gelu, LinearPrecision::Bf16, 5), fc2(hidden, out, Activation::None,
                                                                         LinearPrecision::Bf16, 7);
    LinearOp* ops[] = {&fc1.op, &fc2.op};
    linear_prepare_weights(c, ops, true);
    linear_forward(c, fc1.op, x, true, {.deferred = deferred == 1});
    linear_forward(c, fc2.op, fc1.op.y, true, {}, deferred == 1 ? &fc1.op : nullptr);
    const LinearGradient g2{&fc2.op, &dy};
    linear_backward(c, {&g2, 1});
    const LinearGradient g1{&fc1.op, &fc2.op.dx};
    linear_backward(c, {&g1, 1});
    for (const Tensor* t : {&fc2.op.y, &fc1.op.dx, &fc1.dw, &fc1.db, &fc2.dw, &fc2.db})
      results[deferred].emplace_back(t->span<float>().begin(), t->span<float>().end());
  }
  for (size_t k = 0; k < results[0].size(); ++k) EXPECT_TRUE(testing::same_bits(results[0][k], results[1][k])) << k;
}

// A deferred output finished into a bf16 copy (a biased projection's SDPA operand): on the CPU,
// linear_finish and then convert; mismatched arguments are named.
TEST(LinearFinish, IntoBf16IsFinishThenConvert) {
  const int64_t rows = 5, in = 8, out = 6;
  const Tensor x = testing::host_tensor(testing::random_vector(rows * in, 13, -2, 2), {rows, in});
  Context c;
  Layer l(in, out, Activation::Gelu, LinearPrecision::Bf16, 9);
  LinearOp* one[] = {&l.op};
  linear_prepare_weights(c, one, true);
  linear_forward(c, l.op, x, true, {.deferred = true});
  Tensor copy;
  Tensor* outs[] = {&copy};
  linear_finish(c, one, DType::Bf16, outs);
  Tensor want;
  convert(c, l.op.y, DType::Bf16, want);  // y finished in place by the call
  ASSERT_EQ(copy.shape(), (std::vector<int64_t>{rows, out}));
  EXPECT_TRUE(std::equal(copy.span<uint16_t>().begin(), copy.span<uint16_t>().end(), want.span<uint16_t>().begin()));
  Tensor* two[] = {&copy, &want};
  EXPECT_THAT(testing::error_of([&] { linear_finish(c, one, DType::Bf16, two); }),
              ::testing::HasSubstr("1 Linears and 2 outputs"));
  EXPECT_THAT(testing::error_of([&] { linear_finish(c, one, DType::I32, outs); }),
              ::testing::HasSubstr("into f32 or bf16"));
  Tensor* into_y[] = {&l.op.y};
  EXPECT_THAT(testing::error_of([&] { linear_finish(c, one, DType::F32, into_y); }),
              ::testing::HasSubstr("must not be the Linear's y"));
  linear_forward(c, l.op, x, true, {.deferred = true});  // y is x W again: into f32, the finished values
  Tensor f32;
  Tensor* f32_out[] = {&f32};
  linear_finish(c, one, DType::F32, f32_out);
  EXPECT_TRUE(std::equal(want.span<uint16_t>().begin(), want.span<uint16_t>().end(), f32.span<float>().begin(),
                         [](uint16_t h, float v) { return h == float_to_bf16(v); }));
}

// SwiGLU's gate deferred into the Linear (GatedInput): on the CPU, swiglu_forward into act, then the
// Linear on act: the same bits as the two ops called in turn, forward and backward.
TEST(LinearGated, IsSwigluThenTheLinear) {
  const int64_t rows = 6, in = 16, out = 5;
  const Tensor gate = testing::host_tensor(testing::random_vector(rows * in, 8, -4, 4), {rows, in});
  const Tensor up = testing::host_tensor(testing::random_vector(rows * in, 9), {rows, in});
  const Tensor dy = testing::host_tensor(testing::random_vector(rows * out, 10), {rows, out});
  std::vector<std::vector<float>> results[2];
  for (int gated = 0; gated < 2; ++gated) {
    Context c;
    Layer down(in, out, Activation::None, LinearPrecision::Bf16, 11);
    LinearOp* op = &down.op;
    linear_prepare_weights(c, {&op, 1}, true);
    Tensor act;
    if (gated == 1) {
      linear_forward(c, down.op, GatedInput{&gate, &up, true, &act}, true);
    } else {
      swiglu_forward(c, gate, up, true, act);
      linear_forward(c, down.op, act, true);
    }
    const LinearGradient g{&down.op, &dy};
    linear_backward(c, {&g, 1});
    for (const Tensor* t : {&act, &down.op.y, &down.op.dx, &down.dw, &down.db})
      results[gated].emplace_back(t->span<float>().begin(), t->span<float>().end());
  }
  for (size_t k = 0; k < results[0].size(); ++k) EXPECT_TRUE(testing::same_bits(results[0][k], results[1][k])) << k;
}

TEST(LinearGelu, BackwardWithoutInputGradientLeavesDxAndGivesTheSameWeightGradients) {
  const int64_t rows = 9, in = 16, out = 8;
  const Tensor x = testing::host_tensor(testing::random_vector(rows * in, 8, -2, 2), {rows, in});
  const Tensor dy = testing::host_tensor(testing::random_vector(rows * out, 9), {rows, out});
  for (LinearPrecision p : {LinearPrecision::Fp32, LinearPrecision::Bf16}) {
    std::vector<float> grads[2];
    for (int with_dx = 0; with_dx < 2; ++with_dx) {
      Context c;
      Layer l(in, out, Activation::Gelu, p, 10);
      LinearOp* op = &l.op;
      linear_prepare_weights(c, {&op, 1}, true);
      linear_forward(c, l.op, x, true);
      sized(l.op.dx, {rows, in}, DType::F32, Device::Cpu);
      std::fill_n(l.op.dx.data<float>(), rows * in, 7.0f);
      const LinearGradient g{.linear = &l.op, .dy = &dy, .input_gradient = with_dx == 1};
      linear_backward(c, {&g, 1});
      EXPECT_EQ(l.op.dx.data<float>()[0] == 7.0f, with_dx == 0);
      grads[with_dx].assign(l.dw.span<float>().begin(), l.dw.span<float>().end());
      grads[with_dx].insert(grads[with_dx].end(), l.db.span<float>().begin(), l.db.span<float>().end());
    }
    EXPECT_TRUE(testing::same_bits(grads[0], grads[1]));
  }
}

// A bf16 input and output gradient (an attention's, as cuDNN makes them) give the bits their values
// give in f32, and dx asked for in bf16 is dx rounded; an input shared or prepared ahead stays f32.
TEST(LinearBf16Io, Bf16InputAndGradientAreTheirValues) {
  const int64_t rows = 6, in = 12, out = 10;
  std::vector<float> xv = testing::random_vector(rows * in, 11, -2, 2), dyv = testing::random_vector(rows * out, 12);
  for (std::vector<float>* v : {&xv, &dyv}) round_bf16(*v, *v);
  for (LinearPrecision p : {LinearPrecision::Fp32, LinearPrecision::Bf16}) {
    std::vector<float> results[2];
    for (int bf16 = 0; bf16 < 2; ++bf16) {
      Context c;
      const DType io = bf16 == 1 ? DType::Bf16 : DType::F32;
      Tensor x, dy, dx;
      convert(c, testing::host_tensor(xv, {rows, in}), io, x);
      convert(c, testing::host_tensor(dyv, {rows, out}), io, dy);
      Layer l(in, out, Activation::None, p, 13);
      LinearOp* op = &l.op;
      linear_prepare_weights(c, {&op, 1}, true);
      linear_forward(c, l.op, x, true);
      const LinearGradient g{.linear = &l.op, .dy = &dy, .dx_bf16 = bf16 == 1 ? &dx : nullptr};
      linear_backward(c, {&g, 1});
      if (bf16 == 0) convert(c, l.op.dx, DType::Bf16, dx);
      ASSERT_EQ(dx.dtype(), DType::Bf16);
      Tensor dx_values;
      convert(c, dx, DType::F32, dx_values);
      for (const Tensor* t : {&l.op.y, &dx_values, &l.dw, &l.db})
        results[bf16].insert(results[bf16].end(), t->span<float>().begin(), t->span<float>().end());
    }
    EXPECT_TRUE(testing::same_bits(results[0], results[1])) << static_cast<int>(p);
  }
  Context c;
  Layer l(in, out, Activation::None, LinearPrecision::Bf16, 13);
  Tensor x;
  convert(c, testing::host_tensor(xv, {rows, in}), DType::Bf16, x);
  EXPECT_THROW(linear_prepare_input(c, l.op, x, true), Error);
}

// A group's Linears have bias gradients all or none (the GPU sums a group's biases in one launch).
TEST(LinearBackward, RefusesAGroupOfBiasedAndUnbiasedLinears) {
  const int64_t rows = 4, in = 6, out = 5;
  const Tensor x = testing::host_tensor(testing::random_vector(rows * in, 14), {rows, in});
  const Tensor dy = testing::host_tensor(testing::random_vector(rows * out, 15), {rows, out});
  Context c;
  Layer biased(in, out, Activation::None, LinearPrecision::Fp32, 16);
  Layer plain(in, out, Activation::None, LinearPrecision::Fp32, 17);
  plain.op.db = nullptr;
  LinearOp* ops[] = {&biased.op, &plain.op};
  linear_prepare_weights(c, ops, true);
  for (LinearOp* op : ops) linear_forward(c, *op, x, true);
  const LinearGradient group[] = {{&biased.op, &dy}, {&plain.op, &dy}};
  EXPECT_THAT(testing::error_of([&] { linear_backward(c, group); }), ::testing::HasSubstr("bias gradients all or none"));
}

// FP8 Linears [in -> out] with their three slots in a table (the input slot in `input_format`, scaled
// as `mode` says; the parameters are not needed to decide sharing).
struct Fp8Linears {
  std::deque<LinearOp> all;  // LinearOp does not move
  const LinearOp& add(ScalingTable& table, int64_t in, int64_t out, ScalingMode mode = ScalingMode::Delayed,
                      Fp8Format input_format = Fp8Format::E4M3, LinearPrecision precision = LinearPrecision::Fp8) {
    LinearOp& l = all.emplace_back();
    l.in = in;
    l.out = out;
    l.precision = precision;
    l.scaling = &table;
    l.slot = table.add("inputs", input_format, mode);
    table.add("kernel", Fp8Format::E4M3, mode);
    table.add("outputs_grad", Fp8Format::E5M2, mode);
    return l;
  }
};

// FP8 Linears share an input's cast where their input slots make the same codes and scales every
// step: delayed, one format, one table (one recipe), and shapes the GPU does not quantize and
// multiply in one launch.
TEST(LinearFp8, SharesAnInputsCastBetweenDelayedSlotsThatScaleAlike) {
  ScalingTable table, other({.amax_history_length = 16});
  Fp8Linears l;
  const LinearOp& query = l.add(table, 160, 64);
  EXPECT_TRUE(shares_input_operands(query, l.add(table, 160, 32)));
  EXPECT_FALSE(shares_input_operands(query, l.add(table, 160, 32, ScalingMode::Current)));
  EXPECT_FALSE(shares_input_operands(l.add(table, 160, 64, ScalingMode::Current),
                                     l.add(table, 160, 32, ScalingMode::Current)));
  EXPECT_FALSE(shares_input_operands(query, l.add(table, 160, 32, ScalingMode::Delayed, Fp8Format::E5M2)));
  EXPECT_FALSE(shares_input_operands(query, l.add(other, 160, 32)));  // another amax history length
  EXPECT_FALSE(shares_input_operands(
      query, l.add(table, 160, 32, ScalingMode::Delayed, Fp8Format::E4M3, LinearPrecision::Bf16)));
  // The GPU quantizes and multiplies x [rows, 64] . [64, n] in one launch for n <= 64: that cast is its own.
  EXPECT_TRUE(shares_input_operands(l.add(table, 64, 128), l.add(table, 64, 256)));
  EXPECT_FALSE(shares_input_operands(l.add(table, 64, 128), l.add(table, 64, 64)));
  EXPECT_FALSE(shares_input_operands(l.add(table, 64, 64), l.add(table, 64, 128)));
}

}  // namespace
}  // namespace fp8kit::ops
