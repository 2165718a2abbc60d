// The remaining layers on the CPU: embedding gather/scatter, causal self-attention end to end by
// finite differences (projections included), LayerNorm parameters, initialisers. (The ops under them
// are checked on both devices by the op table, tests/ops/cuda.)
#include "common/gradient_check.h"
#include "base/error.h"
#include "nn/attention.h"
#include "nn/embedding.h"
#include "nn/init.h"
#include "nn/layer_norm.h"
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

std::vector<float> values(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }
void set(Tensor& t, const std::vector<float>& v) { std::copy(v.begin(), v.end(), t.data<float>()); }
Tensor host(const std::vector<float>& v, std::vector<int64_t> shape) {
  Tensor t(std::move(shape), DType::F32);
  set(t, v);
  return t;
}

TEST(Precision, ParsesAndNames) {
  EXPECT_EQ(parse_precision("FP8"), Precision::Fp8);
  EXPECT_EQ(parse_precision("mixed_bfloat16"), Precision::Bf16);
  EXPECT_EQ(parse_precision("float32"), Precision::Fp32);
  EXPECT_EQ(name(Precision::Bf16), "bf16");
  EXPECT_THROW(parse_precision("fp16"), Error);
}

TEST(Embedding, GathersSumsAndScattersDenseGradients) {
  ParameterSet parameters;
  TokenAndPositionEmbedding e(parameters, "emb", 10, 3, 4);
  parameters.allocate(Device::Cpu);
  ops::Context c;
  set(e.token.value, random_vector(40, 1));
  set(e.position.value, random_vector(12, 2));
  const std::vector<float> token = values(e.token.value), position = values(e.position.value);
  Tensor tokens({2, 3}, DType::I32);  // batch 2 x seq 3
  const int32_t ids[] = {7, 0, 7, 2, 2, 9};
  std::copy(std::begin(ids), std::end(ids), tokens.data<int32_t>());
  const std::vector<float> out = values(e.forward(c, tokens, false, {}));
  for (int bt = 0; bt < 6; ++bt)
    for (int d = 0; d < 4; ++d) EXPECT_EQ(out[bt * 4 + d], token[ids[bt] * 4 + d] + position[(bt % 3) * 4 + d]);
  const std::vector<float> out16 = values(e.forward(c, tokens, true, {}));
  EXPECT_EQ(out16[5], round_bf16(round_bf16(token[0 * 4 + 1]) + round_bf16(position[1 * 4 + 1])));
  const auto g = random_vector(24, 3);
  e.prepare_backward(c, tokens);
  e.backward(c, host(g, {2, 3, 4}));
  const std::vector<float> token_grad = values(e.token.grad), position_grad = values(e.position.grad);
  for (int d = 0; d < 4; ++d) {
    EXPECT_FLOAT_EQ(token_grad[7 * 4 + d], g[0 * 4 + d] + g[2 * 4 + d]);
    EXPECT_FLOAT_EQ(token_grad[2 * 4 + d], g[3 * 4 + d] + g[4 * 4 + d]);
    EXPECT_EQ(token_grad[5 * 4 + d], 0.0f);
    EXPECT_FLOAT_EQ(position_grad[1 * 4 + d], g[1 * 4 + d] + g[4 * 4 + d]);
  }
  Tensor bad({1, 3}, DType::I32);
  bad.data<int32_t>()[2] = 10;
  EXPECT_THROW(e.forward(c, bad, false, {}), Error);
}

TEST(CausalSelfAttention, Fp32GradientsMatchFiniteDifferences) {
  const int64_t batch = 2, seq = 6, hidden = 8, heads = 2, head_dim = 4;
  ParameterSet parameters;
  CausalSelfAttention a(parameters, "dec/self_attention", hidden, heads, head_dim);
  parameters.allocate(Device::Cpu);
  a.set_precision(Precision::Fp32, nullptr);
  ops::Context c(Device::Cpu, 5);
  c.set_step(3);
  uint64_t seed = 10;
  for (Linear* l : a.linears()) {
    set(l->kernel.value, random_vector(l->kernel.numel(), seed++, -0.6f, 0.6f));
    set(l->bias->value, random_vector(l->bias->numel(), seed++, -0.1f, 0.1f));
  }
  EXPECT_EQ(a.query.kernel.name, "dec/self_attention/query/kernel");
  EXPECT_EQ(a.output.kernel.shape, (std::vector<int64_t>{2, 4, 8}));
  auto x = random_vector(batch * seq * hidden, 30);
  const auto w = random_vector(batch * seq * hidden, 31);
  Tensor xt({batch * seq, hidden}, DType::F32);
  const ops::DropoutSpec probabilities{1, 0.1f, true};  // dropout on, a fixed mask (seed 5, step 3)
  auto loss = [&] {
    set(xt, x);
    std::vector<ops::LinearOp*> ops;
    for (Linear* l : a.linears()) ops.push_back(&l->op());
    ops::linear_prepare_weights(c, ops, true);
    return probe(a.forward(c, xt, batch, seq, true, false, probabilities).span<float>(), w);
  };
  loss();
  a.backward(c, host(w, {batch * seq, hidden}));
  std::vector<float> dx(x.size(), 0.0f);
  for (const Tensor* g : a.input_gradients())
    for (size_t i = 0; i < dx.size(); ++i) dx[i] += g->data<float>()[i];
  expect_gradient_close(x, dx, loss, 1e-2, 2e-4, 2e-3, "dx");
  for (Linear* l : a.linears()) {
    const std::vector<float> gk = values(l->kernel.grad), gb = values(l->bias->grad);
    expect_gradient_close(l->kernel.value.span<float>(), gk, loss, 1e-2, 2e-4, 2e-3, l->kernel.name);
    expect_gradient_close(l->bias->value.span<float>(), gb, loss, 1e-2, 2e-4, 2e-3, l->bias->name);
  }
}

TEST(LayerNorm, StartsAtIdentityParameters) {
  ParameterSet parameters;
  LayerNorm n(parameters, "dec/ln", 4);
  parameters.allocate(Device::Cpu);
  ops::Context c;
  EXPECT_EQ(values(n.gamma.value), std::vector<float>(4, 1.0f));
  EXPECT_EQ(values(n.beta.value), std::vector<float>(4, 0.0f));
  EXPECT_EQ(n.gamma.name, "dec/ln/gamma");
  const Tensor x = host({1, 2, 3, 4}, {1, 4});
  const std::vector<float> y = values(n.forward(c, x, false));
  EXPECT_NEAR(y[0], -1.5 / std::sqrt(1.25 + 1e-5), 1e-6);
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
