// Linear: fp32 gradients by finite differences; bf16 and FP8 numerics against slow references
// written here (scalar casts, naive loops); which scale each of the first steps uses under the te
// and keras lags and current scaling; frozen scales in evaluation; FP8 gradients near fp32 ones.
#include "nn/linear.h"

#include "common/gradient_check.h"
#include "numerics/cast.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace fp8kit::nn {
namespace {

using testing::expect_gradient_close;
using testing::probe;
using testing::random_vector;

Linear make(int64_t in, int64_t out, Activation act, uint64_t seed) {
  Linear l("block/dense", in, out, {in, out}, {out}, act);
  l.kernel.value = random_vector(in * out, seed, -0.5f, 0.5f);
  l.bias.value = random_vector(out, seed + 1, -0.2f, 0.2f);
  return l;
}

TEST(Linear, Fp32GradientsMatchFiniteDifferences) {
  for (Activation act : {Activation::None, Activation::Relu}) {
    const int64_t rows = 9, in = 7, out = 5;
    // Inputs whose pre-activations keep clear of ReLU's kink (finite differences cross no kink).
    uint64_t seed = 3;
    for (;; seed += 10) {
      Linear probe_layer = make(in, out, Activation::None, seed);
      const auto pre = probe_layer.forward(random_vector(rows * in, seed + 1), rows, true);
      if (std::all_of(pre.begin(), pre.end(), [](float v) { return std::abs(v) > 0.02f; })) break;
    }
    Linear l = make(in, out, act, seed);
    auto x = random_vector(rows * in, seed + 1);
    const auto w = random_vector(rows * out, 5);
    l.forward(x, rows, true);
    const auto dx = l.backward(w);
    const std::vector<float> dx_copy(dx.begin(), dx.end());
    auto loss = [&] { return probe(l.forward(x, rows, true), w); };
    // A small step keeps the ReLU pattern of these inputs unchanged.
    expect_gradient_close(x, dx_copy, loss, 1e-3, 1e-4, 1e-3, "dx");
    expect_gradient_close(l.kernel.value, l.kernel.grad, loss, 1e-3, 1e-4, 1e-3, "dW");
    expect_gradient_close(l.bias.value, l.bias.grad, loss, 1e-3, 1e-4, 1e-3, "db");
  }
}

TEST(Linear, Bf16RoundsOperandsAndOutputs) {
  const int64_t rows = 6, in = 33, out = 4;
  Linear l = make(in, out, Activation::None, 7);
  l.set_precision(Precision::Bf16);
  const auto x = random_vector(rows * in, 8);
  const auto y = l.forward(x, rows, true);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < in; ++i)
        acc += double(round_bf16(x[r * in + i])) * round_bf16(l.kernel.value[i * out + o]);
      const float expected = round_bf16(round_bf16(static_cast<float>(acc)) + round_bf16(l.bias.value[o]));
      EXPECT_NEAR(y[r * out + o], expected, std::abs(expected) * 0x1p-8 + 1e-6) << r << "," << o;
      EXPECT_EQ(y[r * out + o], round_bf16(y[r * out + o]));
    }
}

// The slow FP8 reference: quantize with the scalar cast, decode, multiply in double. TE scales
// multiply before the cast; Keras divides by its dequantization multiplier.
struct RefScale {
  bool keras;
  float value;  // scale (te) or multiplier (keras)
  float scale_inv() const { return keras ? value : 1.0f / value; }
};
std::vector<uint8_t> quantize_ref(std::span<const float> x, RefScale s, Fp8Format f) {
  std::vector<uint8_t> q(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    q[i] = encode_fp8(s.keras ? x[i] / s.value : x[i] * s.value, f, Overflow::Saturate);
  return q;
}

TEST(Linear, Fp8MatchesSlowReference) {
  for (ScalingLag lag : {ScalingLag::Te, ScalingLag::Keras}) {
    const bool keras = lag == ScalingLag::Keras;
    const int64_t rows = 11, in = 32, out = 9;
    Linear l = make(in, out, Activation::Relu, 11);
    Fp8Recipe recipe;
    recipe.amax_history_length = 16;
    recipe.lag = lag;
    l.set_precision(Precision::Fp8, recipe);
    // Three steps, so the last ones quantize with real delayed scales: te lag from the amaxes up to
    // the previous step, keras lag from those up to the step before (multiplier 1 / (max / amax)).
    std::vector<float> x, dy;
    std::vector<float> amax_x, amax_w, amax_g;
    auto scale = [&](const std::vector<float>& amaxes, float fp8_max) {
      const size_t known = keras ? (amaxes.size() >= 1 ? amaxes.size() - 1 : 0) : amaxes.size();
      if (known == 0) return RefScale{keras, 1.0f};
      const float a = *std::max_element(amaxes.begin(), amaxes.begin() + known);
      return RefScale{keras, keras ? 1.0f / (fp8_max / a) : fp8_max / a};
    };
    for (int step = 0; step < 3; ++step) {
      x = random_vector(rows * in, 20 + step, -3, 3);
      dy = random_vector(rows * out, 30 + step, -1e-3f, 1e-3f);
      const RefScale sx = scale(amax_x, 448.0f), sw = scale(amax_w, 448.0f), sg = scale(amax_g, 57344.0f);
      const auto y = l.forward(x, rows, true);
      const std::vector<float> y_copy(y.begin(), y.end());
      const auto dx = l.backward(dy);

      const auto xq = quantize_ref(x, sx, Fp8Format::E4M3);
      const auto wq = quantize_ref(l.kernel.value, sw, Fp8Format::E4M3);
      ASSERT_EQ(std::vector<uint8_t>(l.quantized_inputs().span<uint8_t>().begin(),
                                     l.quantized_inputs().span<uint8_t>().end()),
                xq);
      ASSERT_EQ(std::vector<uint8_t>(l.quantized_kernel().span<uint8_t>().begin(),
                                     l.quantized_kernel().span<uint8_t>().end()),
                wq);
      EXPECT_EQ(l.used_scale_invs().inputs, sx.scale_inv()) << "step " << step;
      EXPECT_EQ(l.used_scale_invs().kernel, sw.scale_inv()) << "step " << step;
      EXPECT_EQ(l.used_scale_invs().outputs_grad, sg.scale_inv()) << "step " << step;

      // Masked dy (ReLU of the output), then its E5M2 codes.
      std::vector<float> g(rows * out);
      for (int64_t i = 0; i < rows * out; ++i) g[i] = y_copy[i] > 0 ? dy[i] : 0.0f;
      const auto gq = quantize_ref(g, sg, Fp8Format::E5M2);
      ASSERT_EQ(std::vector<uint8_t>(l.quantized_outputs_grad().span<uint8_t>().begin(),
                                     l.quantized_outputs_grad().span<uint8_t>().end()),
                gq);

      auto X = [&](int64_t r, int64_t i) { return double(decode_fp8(xq[r * in + i], Fp8Format::E4M3)); };
      auto W = [&](int64_t i, int64_t o) { return double(decode_fp8(wq[i * out + o], Fp8Format::E4M3)); };
      auto G = [&](int64_t r, int64_t o) { return double(decode_fp8(gq[r * out + o], Fp8Format::E5M2)); };
      const double sxi = sx.scale_inv(), swi = sw.scale_inv(), sgi = sg.scale_inv();
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < out; ++o) {
          double acc = 0;
          for (int64_t i = 0; i < in; ++i) acc += X(r, i) * W(i, o);
          const float pre = round_bf16(round_bf16(static_cast<float>(acc * sxi * swi)) + round_bf16(l.bias.value[o]));
          const float expected = std::max(pre, 0.0f);
          EXPECT_NEAR(y_copy[r * out + o], expected, std::abs(expected) * 0x1p-7 + 1e-6) << "y " << r << "," << o;
        }
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t i = 0; i < in; ++i) {
          double acc = 0, mag = 0;
          for (int64_t o = 0; o < out; ++o) acc += G(r, o) * W(i, o), mag += std::abs(G(r, o) * W(i, o));
          EXPECT_NEAR(dx[r * in + i], acc * sgi * swi, mag * sgi * swi * 1e-6 + 1e-30) << "dx " << r << "," << i;
        }
      for (int64_t i = 0; i < in; ++i)
        for (int64_t o = 0; o < out; ++o) {
          double acc = 0, mag = 0;
          for (int64_t r = 0; r < rows; ++r) acc += X(r, i) * G(r, o), mag += std::abs(X(r, i) * G(r, o));
          EXPECT_NEAR(l.kernel.grad[i * out + o], acc * sxi * sgi, mag * sxi * sgi * 1e-6 + 1e-30)
              << "dW " << i << "," << o;
        }
      for (int64_t o = 0; o < out; ++o) {  // bias gradient from the unquantized, masked dy
        double acc = 0;
        for (int64_t r = 0; r < rows; ++r) acc += g[r * out + o];
        EXPECT_NEAR(l.bias.grad[o], acc, 1e-9);
      }
      auto amax = [](std::span<const float> v) {
        float a = 0;
        for (float e : v) a = std::max(a, std::abs(e));
        return a;
      };
      amax_x.push_back(amax(x));
      amax_w.push_back(amax(l.kernel.value));
      amax_g.push_back(amax(g));
      l.kernel.value[step] += 0.25f;  // the weights move between steps
    }
  }
}

// Steps whose input amax is known exactly: x holds +-amax and smaller values.
std::vector<float> with_amax(int64_t n, float amax, uint64_t seed) {
  auto x = random_vector(n, seed, -0.5f * amax, 0.5f * amax);
  x[seed % n] = (seed % 2) ? -amax : amax;
  return x;
}

struct LagCase {
  ScalingMode mode;
  ScalingLag lag;
  // The expected inputs scale_inv of steps 0..3 for input amaxes 2, 8, 0.5, 1.
  std::vector<float> scale_invs;
};

TEST(Linear, Fp8LagDecidesWhichAmaxEachStepUses) {
  const float amaxes[] = {2.0f, 8.0f, 0.5f, 1.0f};
  auto inv = [](float amax) { return 1.0f / (448.0f / amax); };
  const LagCase cases[] = {
      {ScalingMode::Delayed, ScalingLag::Te, {1.0f, inv(2), inv(8), inv(8)}},
      {ScalingMode::Delayed, ScalingLag::Keras, {1.0f, 1.0f, inv(2), inv(8)}},
      {ScalingMode::Current, ScalingLag::Te, {inv(2), inv(8), inv(0.5f), inv(1)}},
  };
  for (const LagCase& c : cases) {
    const int64_t rows = 4, in = 8, out = 3;
    Linear l = make(in, out, Activation::None, 40);
    Fp8Recipe recipe;
    recipe.mode = c.mode;
    recipe.lag = c.lag;
    recipe.amax_history_length = 8;
    l.set_precision(Precision::Fp8, recipe);
    for (int step = 0; step < 4; ++step) {
      const auto x = with_amax(rows * in, amaxes[step], 50 + step);
      l.forward(x, rows, true);
      l.backward(random_vector(rows * out, 60 + step));
      EXPECT_EQ(l.used_scale_invs().inputs, c.scale_invs[step])
          << "lag " << int(c.lag) << " mode " << int(c.mode) << " step " << step;
      // Evaluation in between uses the next step's scale and changes no state.
      std::vector<std::vector<float>> before;
      for (const StateEntry& e : l.fp8_state()) before.emplace_back(e.data.begin(), e.data.end());
      l.forward(with_amax(rows * in, 100.0f, 70 + step), rows, false);
      if (step < 3 && c.mode == ScalingMode::Delayed) {
        EXPECT_EQ(l.used_scale_invs().inputs, c.scale_invs[step + 1]) << "eval after step " << step;
      }
      size_t k = 0;
      for (const StateEntry& e : l.fp8_state())
        EXPECT_EQ(std::vector<float>(e.data.begin(), e.data.end()), before[k++]) << e.name;
    }
    // The history holds the amaxes, newest first.
    const auto state = l.fp8_state();
    ASSERT_EQ(state[1].name, "block/dense/inputs_amax_history");
    EXPECT_EQ(state[1].data[0], 1.0f);
    EXPECT_EQ(state[1].data[1], 0.5f);
    EXPECT_EQ(state[1].data[3], 2.0f);
  }
}

TEST(Linear, Fp8StateNamesAndSizes) {
  Linear l = make(4, 2, Activation::None, 1);
  EXPECT_TRUE(l.fp8_state().empty());
  l.set_precision(Precision::Fp8);
  const auto s = l.fp8_state();
  ASSERT_EQ(s.size(), 6u);
  const char* names[] = {"inputs_scale",        "inputs_amax_history", "kernel_scale",
                         "kernel_amax_history", "outputs_grad_scale",  "outputs_grad_amax_history"};
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(s[i].name, std::string("block/dense/") + names[i]);
    EXPECT_EQ(s[i].data.size(), i % 2 ? 1024u : 1u);
    EXPECT_EQ(s[i].data[0], i % 2 ? 0.0f : 1.0f);
  }
}

// FP8 gradients of a warmed-up layer stay close to the fp32 ones. E4M3 keeps 3 mantissa bits and
// E5M2 2, so each quantized element is off by up to 2^-4 and 2^-3 relative; over sums of 64
// products the errors average out to a few percent: we require a relative (Frobenius) error below
// 10% for dx and dW and an exact bias gradient.
TEST(Linear, Fp8GradientsStayCloseToFp32) {
  const int64_t rows = 64, in = 32, out = 32;
  Linear f32 = make(in, out, Activation::None, 90), f8 = make(in, out, Activation::None, 90);
  Fp8Recipe recipe;
  recipe.amax_history_length = 4;
  f8.set_precision(Precision::Fp8, recipe);
  for (int step = 0; step < 3; ++step) {
    const auto x = random_vector(rows * in, 91 + step, -2, 2);
    const auto dy = random_vector(rows * out, 95 + step, -1e-4f, 1e-4f);
    f32.forward(x, rows, true);
    const auto dx32 = f32.backward(dy);
    f8.forward(x, rows, true);
    const auto dx8 = f8.backward(dy);
    if (step == 0) continue;  // scales of 1.0 flush these small gradients in E5M2
    auto rel = [](std::span<const float> a, std::span<const float> b) {
      double num = 0, den = 0;
      for (size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * double(a[i] - b[i]), den += double(a[i]) * a[i];
      return std::sqrt(num / den);
    };
    EXPECT_LT(rel(dx32, dx8), 0.1) << step;
    EXPECT_LT(rel(f32.kernel.grad, f8.kernel.grad), 0.1) << step;
    EXPECT_LT(rel(f32.bias.grad, f8.bias.grad), 1e-6) << step;
  }
}

}  // namespace
}  // namespace fp8kit::nn
