// The Linear op's Fp8Block precision on the CPU against a slow reference written here: each 1 x 128
// group and 128 x 128 block quantized with the scalar cast (numerics/cast.h) at its own current scale,
// decoded, and multiplied in double; y, dx and dW at awkward shapes (K not a multiple of 128, one row),
// in both weight layouts, with and without a bias gradient; and y's bf16 rounding, bias and ReLU.
#include "ops/linear.h"

#include "common/gradient_check.h"
#include "common/host_tensors.h"
#include "numerics/cast.h"
#include "numerics/scale.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace fp8kit::ops {
namespace {

// x [rows, cols] quantized in blocks of block_rows x block_cols, each with the current scale of its own
// amax, and decoded: float(code) * (1 / scale), in double.
std::vector<double> quantized(const std::vector<float>& x, int64_t rows, int64_t cols, int64_t block_rows,
                              int64_t block_cols, Fp8Format format) {
  std::vector<double> out(x.size());
  for (int64_t r0 = 0; r0 < rows; r0 += block_rows)
    for (int64_t c0 = 0; c0 < cols; c0 += block_cols) {
      const int64_t r1 = std::min(rows, r0 + block_rows), c1 = std::min(cols, c0 + block_cols);
      float amax = 0.0f;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
      const float scale = current_scale(amax, format);
      const float scale_inv = 1.0f / scale;
      for (int64_t r = r0; r < r1; ++r)
        for (int64_t c = c0; c < c1; ++c)
          out[r * cols + c] = static_cast<double>(decode_fp8(encode_fp8(x[r * cols + c] * scale, format), format)) *
                              static_cast<double>(scale_inv);
    }
  return out;
}

std::vector<float> transposed(const std::vector<float>& x, int64_t rows, int64_t cols) {
  std::vector<float> t(x.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) t[c * rows + r] = x[r * cols + c];
  return t;
}

// y [m, n] = a [m, k] . b [n, k]^T in double, and the sum of the terms' magnitudes (for the tolerance).
struct Product {
  std::vector<double> y, magnitude;
};
Product product(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t n, int64_t k) {
  Product p{std::vector<double>(m * n), std::vector<double>(m * n)};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t t = 0; t < k; ++t) {
        const double term = a[i * k + t] * b[j * k + t];
        p.y[i * n + j] += term;
        p.magnitude[i * n + j] += std::fabs(term);
      }
  return p;
}

// The op's fp32 sums (k exact FP8 products, each 128-slice's partial times two scales) against the
// reference: a few ulps of the magnitude per term.
void expect_near(const Tensor& got, const Product& want, int64_t k, const std::string& what) {
  ASSERT_EQ(got.numel(), static_cast<int64_t>(want.y.size())) << what;
  for (size_t i = 0; i < want.y.size(); ++i) {
    const double tol = static_cast<double>(k + 8) * 0x1p-24 * want.magnitude[i] + 1e-30;
    ASSERT_NEAR(got.data<float>()[i], want.y[i], tol) << what << " at " << i;
  }
}

struct Case {
  int64_t rows, in, out;
  LinearOp::Layout layout;
  bool bias;  // a bias gradient and a ReLU (Keras's Dense), or neither (HF's nn.Linear)
  Fp8Format backward;
};

TEST(LinearFp8Block, MatchesTheBlockQuantizedReference) {
  using Layout = LinearOp::Layout;
  const Case cases[] = {{5, 200, 130, Layout::OutIn, false, Fp8Format::E4M3},
                        {5, 200, 130, Layout::InOut, true, Fp8Format::E5M2},
                        {1, 300, 64, Layout::OutIn, false, Fp8Format::E5M2},
                        {1, 96, 257, Layout::InOut, false, Fp8Format::E4M3},
                        {130, 130, 40, Layout::OutIn, true, Fp8Format::E4M3},
                        {133, 40, 129, Layout::InOut, false, Fp8Format::E5M2}};
  for (const Case& k : cases) {
    const std::string what = fmt::format("{}x{}x{} {} {}", k.rows, k.in, k.out,
                                         k.layout == Layout::OutIn ? "out_in" : "in_out", k.bias ? "bias" : "no bias");
    // Rows and columns of different magnitudes, so that every group and block has its own scale.
    std::vector<float> xv = testing::random_vector(k.rows * k.in, 31, -1.0f, 1.0f);
    for (int64_t i = 0; i < k.rows * k.in; ++i) xv[i] *= std::pow(4.0f, static_cast<float>(i % k.in / 100 + i / k.in % 3));
    std::vector<float> w_oi = testing::random_vector(k.in * k.out, 32, -0.2f, 0.2f);  // [out, in]
    for (int64_t i = 0; i < k.in * k.out; ++i) w_oi[i] *= std::pow(0.25f, static_cast<float>(i / k.in / 128 + i % k.in / 150));
    std::vector<float> dyv = testing::random_vector(k.rows * k.out, 33, -1.0f, 1.0f);
    const std::vector<float> bv = testing::random_vector(k.out, 34, -0.5f, 0.5f);

    const bool out_in = k.layout == Layout::OutIn;
    Tensor x = testing::host_tensor(xv, {k.rows, k.in});
    Tensor w = out_in ? testing::host_tensor(w_oi, {k.out, k.in}) : testing::host_tensor(transposed(w_oi, k.out, k.in), {k.in, k.out});
    Tensor b = testing::host_tensor(k.bias ? bv : std::vector<float>(k.out, 0.0f), {k.out});
    Tensor dw(w.shape(), DType::F32), db({k.out}, DType::F32);
    Tensor dy = testing::host_tensor(dyv, {k.rows, k.out});
    Context c;
    LinearOp l;
    l.in = k.in;
    l.out = k.out;
    l.layout = k.layout;
    l.activation = k.bias ? Activation::Relu : Activation::None;
    l.precision = LinearPrecision::Fp8Block;
    l.block_recipe.backward_format = k.backward;
    l.w = &w;
    l.b = k.bias ? &b : nullptr;
    l.dw = &dw;
    l.db = k.bias ? &db : nullptr;
    LinearOp* op = &l;
    linear_prepare_weights(c, {&op, 1}, true);

    // y before its bias and activation (a deferred output), then after them: bf16(bf16(y) + bf16(b)), ReLU.
    linear_forward(c, l, x, true, {.deferred = true});
    const std::vector<double> xq = quantized(xv, k.rows, k.in, 1, 128, Fp8Format::E4M3);
    const std::vector<double> wq = quantized(w_oi, k.out, k.in, 128, 128, Fp8Format::E4M3);
    expect_near(l.y, product(xq, wq, k.rows, k.out, k.in), k.in, what + " y");
    const std::vector<float> raw = testing::float_values(l.y);
    linear_forward(c, l, x, true);
    for (int64_t i = 0; i < k.rows * k.out; ++i) {
      const float v = round_bf16(round_bf16(raw[i]) + round_bf16(b.data<float>()[i % k.out]));
      // Without bias and ReLU there is no epilogue: y is the GEMM's output as it is.
      const float expected = !l.has_epilogue() ? raw[i] : k.bias ? std::max(v, 0.0f) : v;
      ASSERT_EQ(l.y.data<float>()[i], expected) << what << " y at " << i;
    }

    linear_backward(c, std::vector<LinearGradient>{{&l, &dy}});
    // g: dy through the ReLU (from the forward's output).
    std::vector<float> g = dyv;
    for (int64_t i = 0; i < k.rows * k.out; ++i)
      if (k.bias && !(l.y.data<float>()[i] > 0.0f)) g[i] = 0.0f;
    // dgrad: g 1 x 128 along out, W's 128 x 128 blocks transposed ([in, out]).
    const std::vector<double> gq = quantized(g, k.rows, k.out, 1, 128, k.backward);
    std::vector<double> wq_t(wq.size());
    for (int64_t o = 0; o < k.out; ++o)
      for (int64_t i = 0; i < k.in; ++i) wq_t[i * k.out + o] = wq[o * k.in + i];
    expect_near(l.dx, product(gq, wq_t, k.rows, k.in, k.out), k.out, what + " dx");
    // wgrad: x^T and g^T, each 1 x 128 along the rows.
    const std::vector<double> xq_t = quantized(transposed(xv, k.rows, k.in), k.in, k.rows, 1, 128, Fp8Format::E4M3);
    const std::vector<double> gq_t = quantized(transposed(g, k.rows, k.out), k.out, k.rows, 1, 128, k.backward);
    expect_near(dw, out_in ? product(gq_t, xq_t, k.out, k.in, k.rows) : product(xq_t, gq_t, k.in, k.out, k.rows),
                k.rows, what + " dw");
    if (k.bias) {
      for (int64_t o = 0; o < k.out; ++o) {
        double sum = 0;
        for (int64_t r = 0; r < k.rows; ++r) sum += g[r * k.out + o];
        ASSERT_NEAR(db.data<float>()[o], sum, 1e-4) << what << " db at " << o;
      }
    }
  }
}

TEST(LinearFp8Block, EvaluationRunsTheForwardOnly) {
  Tensor x = testing::host_tensor(testing::random_vector(3 * 40, 41), {3, 40});
  Tensor w = testing::host_tensor(testing::random_vector(40 * 8, 42), {8, 40});
  Tensor b({8}, DType::F32), dw({8, 40}, DType::F32);
  Context c;
  LinearOp l;
  l.in = 40;
  l.out = 8;
  l.layout = LinearOp::Layout::OutIn;
  l.precision = LinearPrecision::Fp8Block;
  l.w = &w;
  l.b = &b;
  l.dw = &dw;
  LinearOp* op = &l;
  linear_prepare_weights(c, {&op, 1}, false);
  linear_forward(c, l, x, false);
  EXPECT_EQ(l.y.shape(), (std::vector<int64_t>{3, 8}));
  EXPECT_EQ(l.xq_t.codes.numel(), 0);  // no wgrad operand made
  const std::vector<float> y = testing::float_values(l.y);
  linear_forward(c, l, x, true);  // the same output when training
  EXPECT_EQ(testing::float_values(l.y), y);
}

}  // namespace
}  // namespace fp8kit::ops
