// SwiGLU: the forward against a double reference (large negative and positive gates included), bf16
// rounding, the backward by finite differences, in place (dgate = gate, dup = up) with the same bits,
// and the argument errors.
#include "ops/swiglu.h"

#include "common/activation_out_checks.h"
#include "common/error_of.h"
#include "common/gradient_check.h"
#include "cpu_op_test.h"
#include "numerics/cast.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace fp8kit::ops {
namespace {

TEST(Swiglu, ForwardMatchesReference) {
  const int64_t rows = 5, ffn = 37;
  std::vector<float> gate = testing::random_vector(rows * ffn, 1, -8, 8);
  gate[0] = -100.0f;  // exp(100) overflows to inf: silu is -0
  gate[1] = 100.0f;
  gate[2] = 0.0f;
  const auto up = testing::random_vector(rows * ffn, 2, -2, 2);
  Context c;
  const Tensor g = testing::host_tensor(gate, {rows, ffn}), u = testing::host_tensor(up, {rows, ffn});
  Tensor out, out16;
  swiglu_forward(c, g, u, false, out);
  swiglu_forward(c, g, u, true, out16);
  for (int64_t i = 0; i < rows * ffn; ++i) {
    const double want = gate[i] / (1.0 + std::exp(-static_cast<double>(gate[i]))) * up[i];
    ASSERT_NEAR(out.data<float>()[i], want, 1e-6 * (1 + std::abs(want))) << i;
    ASSERT_EQ(out16.data<float>()[i], round_bf16(out.data<float>()[i])) << i;
  }
}

TEST(Swiglu, BackwardMatchesFiniteDifferencesAndMayOverwriteItsInputs) {
  const int64_t rows = 300, ffn = 301;  // threaded
  auto gate = testing::random_vector(rows * ffn, 3, -6, 6), up = testing::random_vector(rows * ffn, 4, -2, 2);
  const auto w = testing::random_vector(rows * ffn, 5);
  Context c;
  auto loss = [&] {
    Tensor out;
    swiglu_forward(c, testing::host_tensor(gate, {rows, ffn}), testing::host_tensor(up, {rows, ffn}), false, out);
    return testing::probe(out.span<float>(), w);
  };
  Tensor g = testing::host_tensor(gate, {rows, ffn}), u = testing::host_tensor(up, {rows, ffn}), dgate, dup;
  const Tensor dout = testing::host_tensor(w, {rows, ffn});
  swiglu_backward(c, g, u, dout, dgate, dup);
  const std::vector<float> dg(dgate.span<float>().begin(), dgate.span<float>().end()),
      du(dup.span<float>().begin(), dup.span<float>().end());
  testing::expect_gradient_close(gate, dg, loss, 1e-2, 1e-4, 1e-3, "dgate");
  testing::expect_gradient_close(up, du, loss, 1e-2, 1e-4, 1e-3, "dup");
  swiglu_backward(c, g, u, dout, g, u);
  EXPECT_TRUE(testing::same_bits(g.span<float>(), dg));
  EXPECT_TRUE(testing::same_bits(u.span<float>(), du));
}

TEST(SwigluOp, ErrorsNameTheOpTheTensorAndTheFix) {
  using testing::error_of;
  using ::testing::HasSubstr;
  Context c;
  Tensor gate({2, 8}, DType::F32), up({2, 7}, DType::F32), up16({2, 8}, DType::Bf16), out, dgate, dup;
  EXPECT_THAT(error_of([&] { swiglu_forward(c, gate, up, false, out); }),
              HasSubstr("swiglu_forward: up (gate's shape) must be [2, 8], got [2, 7]"));
  EXPECT_THAT(error_of([&] { swiglu_backward(c, gate, gate, up16, dgate, dup); }),
              HasSubstr("swiglu_backward: dout (gate's shape) must be f32, got bf16"));
}

// swiglu on a fused gate/up row: swiglu_forward's bf16 bits of the split halves (gates of +-30, exp
// overflowing for -100), threaded rows too; its fp8 outputs are quantize's of that.
TEST(SwigluFused, IsSwigluForwardOfTheHalvesRoundedToBf16) {
  for (const auto& [rows, ffn] : {std::pair<int64_t, int64_t>{1, 1}, {5, 37}, {70, 1000}}) {
    auto values = testing::random_vector(rows * 2 * ffn, 7, -30, 30);
    values[0] = -100.0f;
    Context c;
    const Tensor gate_up = testing::host_tensor(values, {rows, 2 * ffn}, DType::Bf16);
    const std::vector<float> g_up = testing::float_values(gate_up);
    std::vector<float> gate, up;
    for (int64_t r = 0; r < rows; ++r) {
      gate.insert(gate.end(), g_up.begin() + r * 2 * ffn, g_up.begin() + r * 2 * ffn + ffn);
      up.insert(up.end(), g_up.begin() + r * 2 * ffn + ffn, g_up.begin() + (r + 1) * 2 * ffn);
    }
    Tensor want, out;
    swiglu_forward(c, testing::host_tensor(gate, {rows, ffn}), testing::host_tensor(up, {rows, ffn}), true, want);
    swiglu(c, gate_up, {.bf16 = &out});
    EXPECT_EQ(out.shape(), (std::vector<int64_t>{rows, ffn}));
    EXPECT_TRUE(testing::same_bits(testing::float_values(out), want.span<float>())) << rows << "x" << ffn;
  }
}

TEST(SwigluFused, Fp8OutputsAreQuantizeOfTheBf16Result) {
  Context c;
  const Tensor gate_up = testing::host_tensor(testing::random_vector(6 * 2 * 48, 8, -8, 8), {6, 96}, DType::Bf16);
  testing::expect_fp8_is_quantized_bf16(c, [&](const ActivationOut& out) { swiglu(c, gate_up, out); });
}

TEST(SwigluFused, ErrorsNameTheOpTheTensorAndTheFix) {
  using testing::error_of;
  using ::testing::HasSubstr;
  Context c;
  Tensor odd({2, 7}, DType::Bf16), f32({2, 8}, DType::F32), out;
  EXPECT_THAT(error_of([&] { swiglu(c, odd, {.bf16 = &out}); }),
              HasSubstr("swiglu: gate_up must be [rows, 2 ffn] bf16 (gate, then up), got [2, 7]"));
  EXPECT_THAT(error_of([&] { swiglu(c, f32, {.bf16 = &out}); }), HasSubstr("swiglu: gate_up must be bf16"));
}

}  // namespace
}  // namespace fp8kit::ops
