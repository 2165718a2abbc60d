// Linear: fp32 gradients by finite differences; bf16 and FP8 numerics against slow references
// written here (scalar casts, naive loops); which scale each of the first steps uses under the te
// and keras lags and current scaling; frozen scales in evaluation; a replayed (recomputed) forward
// casting with the step's scale and recording nothing; FP8 gradients near fp32 ones.
#include "nn/linear.h"

#include "common/gradient_check.h"
#include "numerics/cast.h"

#include <memory>
#include <optional>

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace fp8kit::nn {
namespace {

using testing::expect_gradient_close;
using testing::probe;
using testing::random_vector;

std::vector<float> values(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }
std::vector<uint8_t> codes(const Tensor& t) { return {t.data<uint8_t>(), t.data<uint8_t>() + t.numel()}; }
void set(Tensor& t, const std::vector<float>& v) { std::copy(v.begin(), v.end(), t.data<float>()); }

// A Linear on the CPU with its parameters, context and (FP8) scaling table, and the old span API
// its tests were written against.
struct Layer {
  ParameterSet parameters;
  ops::Context context;
  std::optional<ops::ScalingTable> scaling;
  std::unique_ptr<Linear> linear;
  Tensor x_;

  Layer(int64_t in, int64_t out, Activation act, uint64_t seed) {
    linear = std::make_unique<Linear>(parameters, "block/dense", in, out, std::vector<int64_t>{in, out},
                                      std::vector<int64_t>{out}, act);
    parameters.allocate(Device::Cpu);
    set(linear->kernel.value, random_vector(in * out, seed, -0.5f, 0.5f));
    set(linear->bias->value, random_vector(out, seed + 1, -0.2f, 0.2f));
  }
  void set_precision(Precision precision, const Fp8Recipe& recipe = {}) {
    scaling.reset();
    if (precision == Precision::Fp8) scaling.emplace(recipe);
    linear->set_precision(precision, scaling ? &*scaling : nullptr);
    if (scaling) scaling->allocate(Device::Cpu);
  }
  std::span<const float> forward(const std::vector<float>& x, int64_t rows, bool training) {
    x_ = Tensor({rows, linear->in_features()}, DType::F32);
    set(x_, x);
    ops::LinearOp* op = &linear->op();
    ops::linear_prepare_weights(context, {&op, 1}, training);
    return linear->forward(context, x_, training).span<float>();
  }
  // The backward, then the scaling table's update (the model's, once per step).
  std::span<const float> backward(const std::vector<float>& dy) {
    Tensor g({x_.dim(0), linear->out_features()}, DType::F32);
    set(g, dy);
    const Tensor& dx = linear->backward(context, g);
    used = {*scaling_inv(0), *scaling_inv(1), *scaling_inv(2)};
    if (scaling) scaling->update(context);
    return dx.span<float>();
  }
  const float* scaling_inv(int k) {
    static const float one = 1.0f;
    return scaling ? scaling->gemm_scale_inv(linear->op().slot + k) : &one;
  }
  struct Used {
    float inputs, kernel, outputs_grad;
  } used{};
  std::vector<StateTensor> fp8_state() { return scaling ? state_tensors(scaling->state()) : std::vector<StateTensor>{}; }
  std::span<float> kernel() { return linear->kernel.value.span<float>(); }
  std::span<float> bias() { return linear->bias->value.span<float>(); }
};

TEST(Linear, Fp32GradientsMatchFiniteDifferences) {
  for (Activation act : {Activation::None, Activation::Relu, Activation::Gelu}) {
    const int64_t rows = 9, in = 7, out = 5;
    // Inputs whose pre-activations keep clear of ReLU's kink (finite differences cross no kink).
    uint64_t seed = 3;
    for (;; seed += 10) {
      Layer probe_layer(in, out, Activation::None, seed);
      const auto pre = probe_layer.forward(random_vector(rows * in, seed + 1), rows, true);
      if (std::all_of(pre.begin(), pre.end(), [](float v) { return std::abs(v) > 0.02f; })) break;
    }
    Layer l(in, out, act, seed);
    auto x = random_vector(rows * in, seed + 1);
    const auto w = random_vector(rows * out, 5);
    l.forward(x, rows, true);
    const auto dx = l.backward(w);
    const std::vector<float> dx_copy(dx.begin(), dx.end());
    const std::vector<float> dw = values(l.linear->kernel.grad), db = values(l.linear->bias->grad);
    auto loss = [&] { return probe(l.forward(x, rows, true), w); };
    // A small step keeps the ReLU pattern of these inputs unchanged.
    expect_gradient_close(x, dx_copy, loss, 1e-3, 1e-4, 1e-3, "dx");
    expect_gradient_close(l.kernel(), dw, loss, 1e-3, 1e-4, 1e-3, "dW");
    expect_gradient_close(l.bias(), db, loss, 1e-3, 1e-4, 1e-3, "db");
  }
}

TEST(Linear, Bf16RoundsOperandsAndOutputs) {
  const int64_t rows = 6, in = 33, out = 4;
  Layer l(in, out, Activation::None, 7);
  l.set_precision(Precision::Bf16);
  const auto x = random_vector(rows * in, 8);
  const auto y = l.forward(x, rows, true);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double acc = 0;
      for (int64_t i = 0; i < in; ++i)
        acc += double(round_bf16(x[r * in + i])) * round_bf16(l.kernel()[i * out + o]);
      const float expected = round_bf16(round_bf16(static_cast<float>(acc)) + round_bf16(l.bias()[o]));
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
    Layer l(in, out, Activation::Relu, 11);
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
      const auto wq = quantize_ref(l.kernel(), sw, Fp8Format::E4M3);
      // The CPU op keeps each operand's codes in its *_t tensor and their exact values beside them.
      ASSERT_EQ(codes(l.linear->op().xc_t), xq);
      ASSERT_EQ(codes(l.linear->op().wc_t), wq);
      EXPECT_EQ(l.used.inputs, sx.scale_inv()) << "step " << step;
      EXPECT_EQ(l.used.kernel, sw.scale_inv()) << "step " << step;
      EXPECT_EQ(l.used.outputs_grad, sg.scale_inv()) << "step " << step;

      // Masked dy (ReLU of the output), then its E5M2 codes.
      std::vector<float> g(rows * out);
      for (int64_t i = 0; i < rows * out; ++i) g[i] = y_copy[i] > 0 ? dy[i] : 0.0f;
      const auto gq = quantize_ref(g, sg, Fp8Format::E5M2);
      ASSERT_EQ(codes(l.linear->op().gc_t), gq);

      auto X = [&](int64_t r, int64_t i) { return double(decode_fp8(xq[r * in + i], Fp8Format::E4M3)); };
      auto W = [&](int64_t i, int64_t o) { return double(decode_fp8(wq[i * out + o], Fp8Format::E4M3)); };
      auto G = [&](int64_t r, int64_t o) { return double(decode_fp8(gq[r * out + o], Fp8Format::E5M2)); };
      const double sxi = sx.scale_inv(), swi = sw.scale_inv(), sgi = sg.scale_inv();
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t o = 0; o < out; ++o) {
          double acc = 0;
          for (int64_t i = 0; i < in; ++i) acc += X(r, i) * W(i, o);
          const float pre = round_bf16(round_bf16(static_cast<float>(acc * sxi * swi)) + round_bf16(l.bias()[o]));
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
          EXPECT_NEAR(l.linear->kernel.grad.data<float>()[i * out + o], acc * sxi * sgi, mag * sxi * sgi * 1e-6 + 1e-30)
              << "dW " << i << "," << o;
        }
      for (int64_t o = 0; o < out; ++o) {  // bias gradient from the unquantized, masked dy
        double acc = 0;
        for (int64_t r = 0; r < rows; ++r) acc += g[r * out + o];
        EXPECT_NEAR(l.linear->bias->grad.data<float>()[o], acc, 1e-9);
      }
      auto amax = [](std::span<const float> v) {
        float a = 0;
        for (float e : v) a = std::max(a, std::abs(e));
        return a;
      };
      amax_x.push_back(amax(x));
      amax_w.push_back(amax(l.kernel()));
      amax_g.push_back(amax(g));
      l.kernel()[step] += 0.25f;  // the weights move between steps
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
    Layer l(in, out, Activation::None, 40);
    Fp8Recipe recipe;
    recipe.mode = c.mode;
    recipe.lag = c.lag;
    recipe.amax_history_length = 8;
    l.set_precision(Precision::Fp8, recipe);
    for (int step = 0; step < 4; ++step) {
      const auto x = with_amax(rows * in, amaxes[step], 50 + step);
      l.forward(x, rows, true);
      l.backward(random_vector(rows * out, 60 + step));
      EXPECT_EQ(l.used.inputs, c.scale_invs[step])
          << "lag " << int(c.lag) << " mode " << int(c.mode) << " step " << step;
      // Evaluation in between uses the next step's scale and changes no state.
      std::vector<std::vector<float>> before;
      for (const StateTensor& e : l.fp8_state()) before.push_back(values(*e.tensor));
      l.forward(with_amax(rows * in, 100.0f, 70 + step), rows, false);
      if (step < 3 && c.mode == ScalingMode::Delayed) {
        EXPECT_EQ(*l.scaling_inv(0), c.scale_invs[step + 1]) << "eval after step " << step;
      }
      size_t k = 0;
      for (const StateTensor& e : l.fp8_state()) EXPECT_EQ(values(*e.tensor), before[k++]) << e.name;
    }
    // The history holds the amaxes, newest first.
    const auto state = l.fp8_state();
    ASSERT_EQ(state[1].name, "block/dense/inputs_amax_history");
    const std::vector<float> history = values(*state[1].tensor);
    EXPECT_EQ(history[0], 1.0f);
    EXPECT_EQ(history[1], 0.5f);
    EXPECT_EQ(history[3], 2.0f);
  }
}

// Activation recomputation queues a training forward again in the backward: while the table is
// replaying, the cast uses the scale the step's forward used (current scaling's: not made again from
// this input), and neither the amax nor health statistics are recorded.
TEST(Linear, Fp8ReplayCastsWithTheStepsScaleAndRecordsNothing) {
  for (const ScalingMode mode : {ScalingMode::Delayed, ScalingMode::Current}) {
    const int64_t rows = 4, in = 8, out = 3;
    Layer l(in, out, Activation::None, 41);
    l.set_precision(Precision::Fp8, {.mode = mode, .amax_history_length = 4});
    l.scaling->set_recording(true);
    const auto x = with_amax(rows * in, 2.0f, 80);
    const std::span<const float> first = l.forward(x, rows, true);
    const std::vector<float> y(first.begin(), first.end());
    const float scale_inv = *l.scaling_inv(0);
    l.scaling->set_replaying(true);
    EXPECT_FALSE(l.scaling->recording());
    EXPECT_EQ(values(l.linear->forward(l.context, l.x_, true)), y) << int(mode);
    Tensor other({rows, in}, DType::F32);
    set(other, with_amax(rows * in, 8.0f, 81));
    l.linear->forward(l.context, other, true);
    EXPECT_EQ(*l.scaling_inv(0), scale_inv) << int(mode);
    l.scaling->set_replaying(false);
    EXPECT_TRUE(l.scaling->recording());
    l.backward(random_vector(rows * out, 82));
    // The histories took the step's amax (2), not the replayed input's (8).
    EXPECT_EQ(values(*l.fp8_state()[1].tensor)[0], 2.0f) << int(mode);
    const std::vector<ops::QuantStats> records = l.scaling->read_records(l.context);
    EXPECT_EQ(records[0].raw.amax, 2.0f) << int(mode);
  }
}

TEST(Linear, Fp8StateNamesAndSizes) {
  Layer l(4, 2, Activation::None, 1);
  EXPECT_TRUE(l.fp8_state().empty());
  l.set_precision(Precision::Fp8);
  const auto s = l.fp8_state();
  ASSERT_EQ(s.size(), 6u);
  const char* names[] = {"inputs_scale",        "inputs_amax_history", "kernel_scale",
                         "kernel_amax_history", "outputs_grad_scale",  "outputs_grad_amax_history"};
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(s[i].name, std::string("block/dense/") + names[i]);
    EXPECT_EQ(s[i].tensor->numel(), i % 2 ? 1024 : 1);
    EXPECT_EQ(values(*s[i].tensor)[0], i % 2 ? 0.0f : 1.0f);
  }
}

// FP8 gradients of a warmed-up layer stay close to the fp32 ones. E4M3 keeps 3 mantissa bits and
// E5M2 2, so each quantized element is off by up to 2^-4 and 2^-3 relative; over sums of 64
// products the errors average out to a few percent: we require a relative (Frobenius) error below
// 10% for dx and dW and an exact bias gradient.
TEST(Linear, Fp8GradientsStayCloseToFp32) {
  const int64_t rows = 64, in = 32, out = 32;
  Layer f32(in, out, Activation::None, 90), f8(in, out, Activation::None, 90);
  Fp8Recipe recipe;
  recipe.amax_history_length = 4;
  f8.set_precision(Precision::Fp8, recipe);
  for (int step = 0; step < 3; ++step) {
    const auto x = random_vector(rows * in, 91 + step, -2, 2);
    const auto dy = random_vector(rows * out, 95 + step, -1e-4f, 1e-4f);
    f32.forward(x, rows, true);
    const auto dx32_span = f32.backward(dy);
    const std::vector<float> dx32(dx32_span.begin(), dx32_span.end());
    f8.forward(x, rows, true);
    const auto dx8 = f8.backward(dy);
    if (step == 0) continue;  // scales of 1.0 flush these small gradients in E5M2
    auto rel = [](std::span<const float> a, std::span<const float> b) {
      double num = 0, den = 0;
      for (size_t i = 0; i < a.size(); ++i) num += (a[i] - b[i]) * double(a[i] - b[i]), den += double(a[i]) * a[i];
      return std::sqrt(num / den);
    };
    EXPECT_LT(rel(dx32, dx8), 0.1) << step;
    EXPECT_LT(rel(f32.linear->kernel.grad.span<float>(), f8.linear->kernel.grad.span<float>()), 0.1) << step;
    EXPECT_LT(rel(f32.linear->bias->grad.span<float>(), f8.linear->bias->grad.span<float>()), 1e-6) << step;
  }
}

// The HF layout ([out, in] weight, no bias) computes what the Keras layout does with the transposed
// kernel and a zero bias, in every precision: the same products, so y, dx and dW^T agree to the
// GEMMs' summation order (FP8: the same codes, the weight's amax being layout-free).
TEST(Linear, OutInLayoutMatchesTransposedInOut) {
  const int64_t rows = 13, in = 24, out = 10;
  for (Precision precision : {Precision::Fp32, Precision::Bf16, Precision::Fp8}) {
    Layer keras(in, out, Activation::None, 31);
    std::fill(keras.bias().begin(), keras.bias().end(), 0.0f);
    keras.set_precision(precision);
    ParameterSet parameters;
    Linear hf(parameters, "model.layers.0.mlp.up_proj", in, out);
    EXPECT_EQ(hf.kernel.name, "model.layers.0.mlp.up_proj.weight");
    EXPECT_EQ(hf.kernel.shape, (std::vector<int64_t>{out, in}));
    EXPECT_EQ(hf.bias, nullptr);
    EXPECT_EQ(hf.name(), "up_proj");
    parameters.allocate(Device::Cpu);
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < out; ++o) hf.kernel.value.data<float>()[o * in + i] = keras.kernel()[i * out + o];
    std::optional<ops::ScalingTable> scaling;
    if (precision == Precision::Fp8) scaling.emplace(Fp8Recipe{});
    hf.set_precision(precision, scaling ? &*scaling : nullptr);
    if (scaling) scaling->allocate(Device::Cpu);

    const auto xv = random_vector(rows * in, 32);
    const auto dyv = random_vector(rows * out, 33);
    const std::vector<float> y_keras = [&] { auto y = keras.forward(xv, rows, true); return std::vector<float>(y.begin(), y.end()); }();
    const std::vector<float> dx_keras = [&] { auto d = keras.backward(dyv); return std::vector<float>(d.begin(), d.end()); }();

    ops::Context c;
    Tensor x({rows, in}, DType::F32), dy({rows, out}, DType::F32);
    set(x, xv);
    set(dy, dyv);
    ops::LinearOp* op = &hf.op();
    ops::linear_prepare_weights(c, {&op, 1}, true);
    const std::vector<float> y = values(hf.forward(c, x, true));
    const std::vector<float> dx = values(hf.backward(c, dy));
    const double tol = precision == Precision::Fp32 ? 1e-5 : 1e-2;
    for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], y_keras[i], tol * (1 + std::abs(y_keras[i]))) << i;
    for (size_t i = 0; i < dx.size(); ++i) EXPECT_NEAR(dx[i], dx_keras[i], tol * (1 + std::abs(dx_keras[i]))) << i;
    const float* dw = hf.kernel.grad.data<float>();
    const float* dw_keras = keras.linear->kernel.grad.data<float>();
    for (int64_t i = 0; i < in; ++i)
      for (int64_t o = 0; o < out; ++o)
        EXPECT_NEAR(dw[o * in + i], dw_keras[i * out + o], tol * (1 + std::abs(dw_keras[i * out + o]))) << i << "," << o;
  }
}

}  // namespace
}  // namespace fp8kit::nn
