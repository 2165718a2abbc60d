// The remaining layers: embedding gather/scatter, causal self-attention end to end by finite
// differences (projections included), LayerNorm parameters, dropout pass-through in evaluation,
// mean pooling, sigmoid + clipped BCE (values and the gradient through the clip), initialisers.
#include "common/gradient_check.h"
#include "base/error.h"
#include "nn/attention.h"
#include "nn/binary_crossentropy.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/init.h"
#include "nn/layer_norm.h"
#include "nn/mean_pool.h"
#include "nn/precision.h"
#include "numerics/cast.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

namespace fp8kit::nn {
namespace {

using testing::expect_gradient_close;
using testing::probe;
using testing::random_vector;

TEST(Precision, ParsesAndNames) {
  EXPECT_EQ(parse_precision("FP8"), Precision::Fp8);
  EXPECT_EQ(parse_precision("mixed_bfloat16"), Precision::Bf16);
  EXPECT_EQ(parse_precision("float32"), Precision::Fp32);
  EXPECT_EQ(name(Precision::Bf16), "bf16");
  EXPECT_THROW(parse_precision("fp16"), Error);
}

TEST(Embedding, GathersSumsAndScattersDenseGradients) {
  TokenAndPositionEmbedding e("emb", 10, 3, 4);
  e.token.value = random_vector(40, 1);
  e.position.value = random_vector(12, 2);
  const std::vector<int32_t> tokens = {7, 0, 7, 2, 2, 9};  // batch 2 x seq 3
  const auto out = e.forward(tokens, 2, false);
  for (int bt = 0; bt < 6; ++bt)
    for (int d = 0; d < 4; ++d)
      EXPECT_EQ(out[bt * 4 + d], e.token.value[tokens[bt] * 4 + d] + e.position.value[(bt % 3) * 4 + d]);
  const auto out16 = e.forward(tokens, 2, true);
  EXPECT_EQ(out16[5], round_bf16(round_bf16(e.token.value[0 * 4 + 1]) + round_bf16(e.position.value[1 * 4 + 1])));
  const auto g = random_vector(24, 3);
  e.backward(g);
  for (int d = 0; d < 4; ++d) {
    EXPECT_FLOAT_EQ(e.token.grad[7 * 4 + d], g[0 * 4 + d] + g[2 * 4 + d]);
    EXPECT_FLOAT_EQ(e.token.grad[2 * 4 + d], g[3 * 4 + d] + g[4 * 4 + d]);
    EXPECT_EQ(e.token.grad[5 * 4 + d], 0.0f);
    EXPECT_FLOAT_EQ(e.position.grad[1 * 4 + d], g[1 * 4 + d] + g[4 * 4 + d]);
  }
  const std::vector<int32_t> bad = {1, 2, 10};
  EXPECT_THROW(e.forward(bad, 1, false), Error);
}

TEST(CausalSelfAttention, Fp32GradientsMatchFiniteDifferences) {
  const int64_t batch = 2, seq = 6, hidden = 8, heads = 2, head_dim = 4;
  CausalSelfAttention a("dec/self_attention", hidden, heads, head_dim, 0.1f, 1);
  uint64_t seed = 10;
  for (Linear* l : {&a.query, &a.key, &a.value, &a.output}) {
    l->kernel.value = random_vector(l->kernel.value.size(), seed++, -0.6f, 0.6f);
    l->bias.value = random_vector(l->bias.value.size(), seed++, -0.1f, 0.1f);
  }
  EXPECT_EQ(a.query.kernel.name, "dec/self_attention/query/kernel");
  EXPECT_EQ(a.output.kernel.shape, (std::vector<int64_t>{2, 4, 8}));
  auto x = random_vector(batch * seq * hidden, 30);
  const auto w = random_vector(batch * seq * hidden, 31);
  auto loss = [&] { return probe(a.forward(x, batch, seq, true, 5, 3), w); };  // dropout on, fixed mask
  loss();
  const auto dx = a.backward(w);
  const std::vector<float> dx_copy(dx.begin(), dx.end());
  expect_gradient_close(x, dx_copy, loss, 1e-2, 2e-4, 2e-3, "dx");
  for (Linear* l : {&a.query, &a.key, &a.value, &a.output}) {
    const std::vector<float> gk = l->kernel.grad, gb = l->bias.grad;
    expect_gradient_close(l->kernel.value, gk, loss, 1e-2, 2e-4, 2e-3, l->kernel.name);
    expect_gradient_close(l->bias.value, gb, loss, 1e-2, 2e-4, 2e-3, l->bias.name);
  }
}

TEST(LayerNorm, StartsAtIdentityParameters) {
  LayerNorm n("dec/ln", 4);
  EXPECT_EQ(n.gamma.value, std::vector<float>(4, 1.0f));
  EXPECT_EQ(n.beta.value, std::vector<float>(4, 0.0f));
  EXPECT_EQ(n.gamma.name, "dec/ln/gamma");
  const std::vector<float> x = {1, 2, 3, 4};
  const auto y = n.forward(x, 1, false);
  EXPECT_NEAR(y[0], -1.5 / std::sqrt(1.25 + 1e-5), 1e-6);
}

TEST(Dropout, PassesThroughInEvaluationAndIsKeyedByStep) {
  Dropout d(2, 0.1f);
  const auto x = random_vector(1000, 1);
  const auto eval = d.forward(x, false, 1, 0, false);
  EXPECT_EQ(eval.data(), x.data());
  const auto s0 = d.forward(x, true, 1, 0, false);
  const std::vector<float> a(s0.begin(), s0.end());
  const auto s0_again = d.forward(x, true, 1, 0, false);
  EXPECT_EQ(a, std::vector<float>(s0_again.begin(), s0_again.end()));
  const auto s1 = d.forward(x, true, 1, 1, false);
  EXPECT_NE(a, std::vector<float>(s1.begin(), s1.end()));
}

TEST(MeanPool, AveragesOverTheSequence) {
  const std::vector<float> x = {1, 2, 3, 4, 5, 6};  // batch 1, seq 3, dim 2
  std::vector<float> out(2), dx(6);
  mean_pool_forward(x, 1, 3, 2, false, out);
  EXPECT_EQ(out, (std::vector<float>{3, 4}));
  mean_pool_backward(std::vector<float>{3, 6}, 1, 3, 2, dx);
  EXPECT_EQ(dx, (std::vector<float>{1, 2, 1, 2, 1, 2}));
}

TEST(BinaryCrossentropy, ClipsProbabilitiesLikeKeras) {
  const std::vector<float> p = {0.9f, 0.2f, 1.0f, 0.0f}, y = {1, 0, 1, 1};
  const double expected =
      (-std::log(0.9f) - std::log(0.8f) - std::log(1.0f - 1e-7f) - std::log(1e-7f)) / 4.0;
  EXPECT_NEAR(binary_crossentropy(p, y), expected, 1e-5);
  std::vector<float> dz(4);
  binary_crossentropy_sigmoid_backward(p, y, dz);
  EXPECT_NEAR(dz[0], (0.9f - 1.0f) / 4.0f, 1e-7);  // inside the clip: (p - y) / batch
  EXPECT_NEAR(dz[1], 0.2f / 4.0f, 1e-7);
  EXPECT_EQ(dz[2], 0.0f);  // clipped (a bf16 sigmoid rounds to 1.0): no gradient
  EXPECT_EQ(dz[3], 0.0f);
}

TEST(BinaryCrossentropy, GradientMatchesFiniteDifferencesThroughSigmoid) {
  auto z = random_vector(8, 4, -3, 3);
  const std::vector<float> y = {1, 0, 1, 0, 0, 1, 1, 0};
  std::vector<float> p(8), dz(8);
  auto loss = [&] {
    sigmoid(z, false, p);
    return static_cast<double>(binary_crossentropy(p, y));
  };
  loss();
  binary_crossentropy_sigmoid_backward(p, y, dz);
  expect_gradient_close(z, dz, loss, 1e-2, 1e-4, 1e-2, "dz");
}

TEST(Init, KerasFansAndGlorotLimitsOfTheSeed) {
  EXPECT_NEAR(glorot_uniform_limit(std::vector<int64_t>{32, 2, 16}), 0.10206, 1e-5);
  EXPECT_NEAR(glorot_uniform_limit(std::vector<int64_t>{2, 16, 32}), 0.25, 1e-6);
  EXPECT_NEAR(glorot_uniform_limit(std::vector<int64_t>{32, 32}), 0.30619, 1e-5);
  EXPECT_NEAR(glorot_uniform_limit(std::vector<int64_t>{32, 1}), 0.42640, 1e-5);
  const Fans f = keras_fans(std::vector<int64_t>{32, 2, 16});
  EXPECT_EQ(f.fan_in, 64);
  EXPECT_EQ(f.fan_out, 512);
  std::mt19937_64 rng(1);
  std::vector<float> v(10000);
  fill_uniform(v, -0.05f, 0.05f, rng);
  float lo = 1, hi = -1;
  for (float x : v) lo = std::min(lo, x), hi = std::max(hi, x);
  EXPECT_GE(lo, -0.05f);
  EXPECT_LT(hi, 0.05f);
  EXPECT_LT(lo, -0.049f);
  EXPECT_GT(hi, 0.049f);
}

}  // namespace
}  // namespace fp8kit::nn
