// The seed classifier: 653,953 parameters with Keras names and the spec's initialisers, the
// summary, the FP8 state (24,600 values), dropout keyed by (seed, step), frozen FP8 state in
// evaluation, whole-model gradients by finite differences, FP8 and bf16 gradients near fp32 ones,
// and a tiny overfit in fp32 and FP8.
#include "models/seed_classifier.h"

#include "base/error.h"
#include "common/gradient_check.h"
#include "nn/init.h"
#include "optim/adam.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <random>
#include <vector>

namespace fp8kit::models {
namespace {

using nn::Precision;
using ::testing::HasSubstr;

// A small model for the tests that train or differentiate (the seed's is 200 x 32 x 20000).
SeedClassifierConfig tiny() { return {.vocabulary_size = 24, .sequence_length = 8, .hidden_dim = 16, .num_heads = 2,
                                      .intermediate_dim = 16, .dropout = 0.1f}; }

std::vector<int32_t> random_tokens(int batch, const SeedClassifierConfig& c, uint64_t seed) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<int32_t> t(static_cast<size_t>(batch) * c.sequence_length);
  for (int32_t& x : t) x = static_cast<int32_t>(rng() % c.vocabulary_size);
  return t;
}

std::vector<float> values(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

TEST(SeedClassifier, HasTheSeedsParametersAndNames) {
  SeedClassifier model({}, 1);
  EXPECT_EQ(model.parameter_count(), 653953);
  const auto params = model.parameters();
  ASSERT_EQ(params.size(), 22u);
  EXPECT_EQ(params[0]->name, "token_and_position_embedding/token_embedding/embeddings");
  EXPECT_EQ(params[1]->name, "token_and_position_embedding/position_embedding/embeddings");
  EXPECT_EQ(params[2]->name, "transformer_decoder/self_attention/query/kernel");
  EXPECT_EQ(params[2]->shape, (std::vector<int64_t>{32, 2, 16}));
  EXPECT_EQ(params[3]->shape, (std::vector<int64_t>{2, 16}));
  EXPECT_EQ(params[8]->name, "transformer_decoder/self_attention/attention_output/kernel");
  EXPECT_EQ(params[8]->shape, (std::vector<int64_t>{2, 16, 32}));
  EXPECT_EQ(params[10]->name, "transformer_decoder/self_attention_layer_norm/gamma");
  EXPECT_EQ(params[12]->name, "transformer_decoder/feedforward_intermediate_dense/kernel");
  EXPECT_EQ(params[16]->name, "transformer_decoder/feedforward_layer_norm/gamma");
  EXPECT_EQ(params[18]->name, "dense/kernel");
  EXPECT_EQ(params[20]->name, "dense_1/kernel");
  EXPECT_EQ(params[21]->shape, (std::vector<int64_t>{1}));
}

TEST(SeedClassifier, InitialisesAsTheSpecSays) {
  SeedClassifier model({}, 2);
  for (const nn::Parameter* p : model.parameters()) {
    float lo = INFINITY, hi = -INFINITY;
    for (float v : p->value.span<float>()) lo = std::min(lo, v), hi = std::max(hi, v);
    const std::string& n = p->name;
    if (n.ends_with("/embeddings")) {
      EXPECT_GE(lo, -0.05f) << n;
      EXPECT_LT(hi, 0.05f) << n;
      EXPECT_LT(lo, -0.045f) << n;
    } else if (n.ends_with("/kernel")) {
      const float limit = nn::glorot_uniform_limit(p->shape);
      EXPECT_GE(lo, -limit) << n;
      EXPECT_LT(hi, limit) << n;
      EXPECT_GT(hi - lo, limit * (p->numel() > 100 ? 1.8f : 0.5f)) << n;  // spans the range
    } else if (n.ends_with("/bias") || n.ends_with("/beta")) {
      EXPECT_EQ(lo, 0.0f) << n;
      EXPECT_EQ(hi, 0.0f) << n;
    } else {
      ASSERT_TRUE(n.ends_with("/gamma")) << n;
      EXPECT_EQ(lo, 1.0f);
      EXPECT_EQ(hi, 1.0f);
    }
  }
  // Same seed, same weights.
  SeedClassifier again({}, 2);
  EXPECT_EQ(values(again.parameters()[5]->value), values(model.parameters()[5]->value));
}

TEST(SeedClassifier, SummaryLooksLikeKeras) {
  SeedClassifier model({}, 3);
  const std::string s = model.summary();
  EXPECT_THAT(s, HasSubstr("Layer (type)"));
  EXPECT_THAT(s, HasSubstr("token_and_position_embedding"));
  EXPECT_THAT(s, HasSubstr("(TokenAndPositionEmbedding)"));
  EXPECT_THAT(s, HasSubstr("(None, 200, 32)"));
  EXPECT_THAT(s, HasSubstr("646,400"));
  EXPECT_THAT(s, HasSubstr("6,464"));
  EXPECT_THAT(s, HasSubstr("dense_1 (Dense)"));
  EXPECT_THAT(s, HasSubstr("Total params: 653,953 (2.49 MB)"));
  EXPECT_THAT(s, HasSubstr("Trainable params: 653,953 (2.49 MB)"));
  EXPECT_THAT(s, HasSubstr("Non-trainable params: 0 (0.00 B)"));
  EXPECT_THAT(s, ::testing::Not(HasSubstr("FP8")));
  model.set_precision(Precision::Fp8);
  EXPECT_THAT(model.summary(), HasSubstr("FP8 scaling state: 24,600 values (96.09 KB) in 8 quantized layers"));
  EXPECT_THAT(model.summary(),
              HasSubstr("FP8 recipe: delayed scaling (te lag), amax history 1024 (max), margin 0, e4m3 forward, e5m2 backward"));
}

TEST(SeedClassifier, Fp8StateIsKerasLikeAnd24600Values) {
  SeedClassifier model({}, 4);
  EXPECT_TRUE(model.fp8_state().empty());
  EXPECT_TRUE(model.quantized_layers().empty());
  model.set_precision(Precision::Fp8);
  EXPECT_EQ(model.quantized_layers(),
            (std::vector<std::string>{"query", "key", "value", "attention_output", "feedforward_intermediate_dense",
                                      "feedforward_output_dense", "dense", "dense_1"}));
  const auto state = model.fp8_state();
  ASSERT_EQ(state.size(), 48u);
  size_t count = 0;
  for (const auto& e : state) count += e.tensor->numel();
  EXPECT_EQ(count, 24600u);
  EXPECT_EQ(state[0].name, "transformer_decoder/self_attention/query/inputs_scale");
  EXPECT_EQ(state[1].name, "transformer_decoder/self_attention/query/inputs_amax_history");
  EXPECT_EQ(state[1].shape, (std::vector<int64_t>{1024}));
  EXPECT_EQ(state[47].name, "dense_1/outputs_grad_amax_history");
}

TEST(SeedClassifier, DropoutDependsOnlyOnSeedAndStep) {
  const auto c = tiny();
  const auto tokens = random_tokens(4, c, 5);
  SeedClassifier a(c, 7), b(c, 7);
  auto run = [&](SeedClassifier& m, bool training, uint64_t step) {
    const auto p = m.forward(tokens, 4, training, step);
    return std::vector<float>(p.begin(), p.end());
  };
  const auto a5 = run(a, true, 5);
  run(a, true, 6);  // an unrelated step in between changes nothing
  EXPECT_EQ(run(a, true, 5), a5);
  EXPECT_EQ(run(b, true, 5), a5);  // a fresh model: same masks
  EXPECT_NE(run(a, true, 6), a5);
  EXPECT_EQ(run(a, false, 5), run(a, false, 9));  // no dropout in evaluation
  EXPECT_NE(run(a, false, 5), a5);
}

TEST(SeedClassifier, EvaluationFreezesFp8State) {
  const auto c = tiny();
  SeedClassifier model(c, 8);
  model.set_precision(Precision::Fp8);
  const auto tokens = random_tokens(4, c, 6);
  const std::vector<float> labels = {1, 0, 1, 0};
  model.forward(tokens, 4, true, 0);
  model.backward(labels);
  auto snapshot = [&] {
    std::vector<float> all;
    for (const auto& e : model.fp8_state()) {
      const std::vector<float> v = values(*e.tensor);
      all.insert(all.end(), v.begin(), v.end());
    }
    return all;
  };
  const auto before = snapshot();
  model.forward(tokens, 4, false, 1);
  EXPECT_EQ(snapshot(), before);
  model.forward(tokens, 4, true, 1);  // a training step moves it (the whole table, after its backward)
  model.backward(labels);
  EXPECT_NE(snapshot(), before);
}

TEST(SeedClassifier, BackwardNeedsATrainingForward) {
  const auto c = tiny();
  SeedClassifier model(c, 9);
  const auto tokens = random_tokens(2, c, 1);
  EXPECT_THROW(model.backward(std::vector<float>{1, 0}), Error);
  model.forward(tokens, 2, false, 0);
  EXPECT_THROW(model.backward(std::vector<float>{1, 0}), Error);
  model.forward(tokens, 2, true, 0);
  EXPECT_THROW(model.backward(std::vector<float>{1}), Error);
  EXPECT_THROW(model.forward(std::vector<int32_t>{1, 2, 3}, 2, true, 0), Error);
}

// Whole-model gradients in fp32 with dropout on (fixed masks for a fixed step), by central
// differences over a few elements of every tensor. With ~400 ReLUs behind a LayerNorm, a step can
// cross a kink for an element or two, so the check is aggregate: per tensor, the distance between
// the finite-difference and analytic vectors must be below 5% of the analytic norm plus the float
// noise of the differences (2e-4 per element: the loss is float32-accurate, the step 3e-4). Each
// layer has its own element-wise check in tests/nn and tests/ops.
TEST(SeedClassifier, Fp32GradientsMatchFiniteDifferences) {
  const auto c = tiny();
  SeedClassifier model(c, 10);
  const int batch = 3;
  const auto tokens = random_tokens(batch, c, 11);
  const std::vector<float> labels = {1, 0, 1};
  model.forward(tokens, batch, true, 4);
  model.backward(labels);
  auto loss = [&] {
    const auto p = model.forward(tokens, batch, true, 4);
    double sum = 0;
    for (int i = 0; i < batch; ++i) sum -= labels[i] ? std::log(double(p[i])) : std::log(1.0 - p[i]);
    return sum / batch;
  };
  const double h = 3e-4;
  for (nn::Parameter* p : model.parameters()) {
    const std::vector<float> grad = values(p->grad);
    float* value = p->value.data<float>();
    double num = 0, den = 0;
    const size_t stride = std::max<size_t>(1, grad.size() / 16);
    int count = 0;
    for (size_t i = 0; i < grad.size(); i += stride, ++count) {
      const float saved = value[i];
      value[i] = static_cast<float>(saved + h);
      const double plus = loss();
      value[i] = static_cast<float>(saved - h);
      const double minus = loss();
      value[i] = saved;
      const double fd = (plus - minus) / (double(static_cast<float>(saved + h)) - static_cast<float>(saved - h));
      num += (fd - grad[i]) * (fd - grad[i]);
      den += double(grad[i]) * grad[i];
    }
    EXPECT_LE(std::sqrt(num), 0.05 * std::sqrt(den) + 2e-4 * std::sqrt(count)) << p->name;
  }
}

// Relative Frobenius distance of two gradients.
double relative_error(const std::vector<float>& reference, const std::vector<float>& other) {
  double num = 0, den = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    num += (double(reference[i]) - other[i]) * (double(reference[i]) - other[i]);
    den += double(reference[i]) * reference[i];
  }
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

// Gradients of the same weights and batch under bf16 and FP8 (current scaling, so no warm-up) stay
// near the fp32 ones. bf16 keeps 8 significant bits (0.2% RMS per rounding) and the gradient
// passes a dozen rounded layers: 5%. FP8 rounds both GEMM operands to E4M3 (3.6% RMS) and every
// Linear's output gradient to E5M2 (7% RMS), in the forward too, so the probabilities, the ReLU
// patterns and the backward all move; measured here 11-40% relative error per tensor with the
// direction kept (cosine 0.93-0.998): we require < 45% and cosine > 0.9. The key bias is skipped:
// its exact gradient is zero (softmax ignores a constant added to a row of scores), so any
// rounding noise is an infinite relative error.
TEST(SeedClassifier, Bf16AndFp8GradientsStayNearFp32) {
  const auto c = tiny();
  const int batch = 16;
  const auto tokens = random_tokens(batch, c, 12);
  std::vector<float> labels(batch);
  for (int i = 0; i < batch; ++i) labels[i] = static_cast<float>(i % 2);
  auto grads = [&](Precision precision, ScalingMode mode = ScalingMode::Current) {
    SeedClassifier model(c, 13);
    Fp8Recipe recipe;
    recipe.mode = mode;
    model.set_precision(precision, recipe);
    model.forward(tokens, batch, true, 0);
    model.backward(labels);
    std::vector<std::vector<float>> g;
    for (const nn::Parameter* p : model.parameters()) g.push_back(values(p->grad));
    return g;
  };
  const auto g32 = grads(Precision::Fp32), g16 = grads(Precision::Bf16);
  SeedClassifier named(c, 13);
  const auto names = named.parameters();
  // Per-tensor current scaling and block scaling (the Linears with bias and ReLU, Keras's kernel shapes).
  for (const ScalingMode mode : {ScalingMode::Current, ScalingMode::Block}) {
    const auto g8 = grads(Precision::Fp8, mode);
    for (size_t i = 0; i < g32.size(); ++i) {
      if (names[i]->name.ends_with("key/bias")) continue;
      double dot = 0, n32 = 0, n8 = 0;
      for (size_t k = 0; k < g32[i].size(); ++k)
        dot += double(g32[i][k]) * g8[i][k], n32 += double(g32[i][k]) * g32[i][k], n8 += double(g8[i][k]) * g8[i][k];
      EXPECT_LT(relative_error(g32[i], g16[i]), 0.05) << names[i]->name;
      EXPECT_LT(relative_error(g32[i], g8[i]), 0.45) << names[i]->name << " " << describe(Fp8Recipe{.mode = mode});
      EXPECT_GT(dot / std::sqrt(n32 * n8), 0.9) << names[i]->name << " " << describe(Fp8Recipe{.mode = mode});
    }
  }
}

// The full-size model trains a step in every precision (and the keras lag) with finite results.
// In FP8 the first step quantizes output gradients with scale 1.0, so the decoder's tiny
// gradients flush to zero in E5M2 (faithful to TE and Keras); the head's do not.
TEST(SeedClassifier, FullSizeStepInEveryPrecision) {
  Fp8Recipe keras;
  keras.lag = ScalingLag::Keras;
  for (int run = 0; run < 4; ++run) {
    SeedClassifier model({}, 16);
    const auto tokens = random_tokens(4, model.config(), 17);
    const std::vector<float> labels = {1, 0, 0, 1};
    if (run < 3) {
      model.set_precision(static_cast<Precision>(run));
    } else {
      quantize(model, keras);
    }
    optim::Adam adam(model.parameter_set());
    const std::vector<float> before = values(model.parameters()[20]->value);  // dense_1/kernel
    model.forward(tokens, 4, true, 0);
    const float loss = model.backward(labels);
    EXPECT_TRUE(std::isfinite(loss)) << run;
    EXPECT_NEAR(loss, std::log(2.0f), 0.1f) << run;  // an untrained model is near chance
    adam.step(model.context());
    EXPECT_NE(values(model.parameters()[20]->value), before) << run;
    for (const float p : model.forward(tokens, 4, false, 0)) EXPECT_TRUE(p > 0.0f && p < 1.0f) << run;
  }
}

// Resuming is exact: parameters, Adam's state and the FP8 state views hold everything a step
// depends on (with the model seed and the step number, which key dropout), so copying them into a
// fresh model and optimizer and continuing gives the same bits as never stopping. Both lags and
// current scaling.
TEST(SeedClassifier, ResumeFromStateViewsIsExact) {
  const auto c = tiny();
  const int batch = 4;
  const std::vector<float> labels = {1, 0, 0, 1};
  for (int variant = 0; variant < 3; ++variant) {
    Fp8Recipe recipe;
    recipe.amax_history_length = 5;
    if (variant == 1) recipe.lag = ScalingLag::Keras;
    if (variant == 2) recipe.mode = ScalingMode::Current;
    auto train = [&](SeedClassifier& model, optim::Adam& adam, uint64_t from, uint64_t to) {
      for (uint64_t step = from; step < to; ++step) {
        model.forward(random_tokens(batch, c, 100 + step), batch, true, step);
        model.backward(labels);
        adam.step(model.context());
      }
    };
    SeedClassifier straight(c, 20), first(c, 20), resumed(c, 20);
    for (SeedClassifier* m : {&straight, &first, &resumed}) quantize(*m, recipe);
    optim::Adam straight_adam(straight.parameter_set()), first_adam(first.parameter_set()),
        resumed_adam(resumed.parameter_set());
    train(straight, straight_adam, 0, 7);
    train(first, first_adam, 0, 4);
    train(resumed, resumed_adam, 0, 2);  // state that the copy must overwrite entirely
    auto copy = [](std::vector<nn::StateTensor> from, std::vector<nn::StateTensor> to) {
      ASSERT_EQ(from.size(), to.size());
      for (size_t i = 0; i < from.size(); ++i) {
        ASSERT_EQ(from[i].name, to[i].name);
        to[i].tensor->copy_from(*from[i].tensor);
      }
    };
    for (size_t i = 0; i < first.parameters().size(); ++i)
      resumed.parameters()[i]->value.copy_from(first.parameters()[i]->value);
    copy(first_adam.state(), resumed_adam.state());
    copy(first.fp8_state(), resumed.fp8_state());
    resumed.scaling()->restored(resumed.context());
    train(resumed, resumed_adam, 4, 7);
    for (size_t i = 0; i < straight.parameters().size(); ++i)
      EXPECT_EQ(values(resumed.parameters()[i]->value), values(straight.parameters()[i]->value))
          << "variant " << variant << " " << straight.parameters()[i]->name;
  }
}

// A training step gives the same bits whatever the OpenMP thread count (reductions run over fixed
// pieces, added in order), so runs and resumes reproduce whatever the thread count.
TEST(SeedClassifier, StepsDoNotDependOnTheThreadCount) {
  const int threads_before = omp_get_max_threads();
  const SeedClassifierConfig c{};  // full size: every threaded path is taken
  const auto tokens = random_tokens(8, c, 21);
  const std::vector<float> labels = {1, 0, 0, 1, 1, 1, 0, 0};
  for (Precision precision : {Precision::Fp32, Precision::Fp8}) {
    std::vector<std::vector<float>> results[2];
    for (int threads : {1, 2}) {
      omp_set_num_threads(threads);
      SeedClassifier model(c, 22);
      model.set_precision(precision);
      optim::Adam adam(model.parameter_set());
      for (uint64_t step = 0; step < 2; ++step) {
        model.forward(tokens, 8, true, step);
        model.backward(labels);
        adam.step(model.context());
      }
      for (const nn::Parameter* p : model.parameters()) results[threads - 1].push_back(values(p->value));
      for (const nn::StateTensor& e : model.fp8_state()) results[threads - 1].push_back(values(*e.tensor));
    }
    ASSERT_EQ(results[0].size(), results[1].size());
    for (size_t i = 0; i < results[0].size(); ++i) EXPECT_EQ(results[0][i], results[1][i]) << nn::name(precision) << " " << i;
  }
  omp_set_num_threads(threads_before);
}

// Label 1: tokens from the upper half of the vocabulary; label 0: the lower half.
void expect_overfits(Precision precision) {
  const auto c = tiny();
  SeedClassifier model(c, 14);
  model.set_precision(precision);
  optim::Adam adam(model.parameter_set(), {.learning_rate = 3e-3f});
  const int batch = 16;
  std::mt19937 rng(15);
  auto make_batch = [&](std::vector<int32_t>& tokens, std::vector<float>& labels) {
    tokens.resize(batch * c.sequence_length);
    labels.resize(batch);
    for (int b = 0; b < batch; ++b) {
      labels[b] = static_cast<float>(rng() % 2);
      const int half = c.vocabulary_size / 2;
      for (int t = 0; t < c.sequence_length; ++t)
        tokens[b * c.sequence_length + t] = static_cast<int32_t>(rng() % half + (labels[b] ? half : 0));
    }
  };
  std::vector<int32_t> tokens;
  std::vector<float> labels;
  float loss = 0;
  for (uint64_t step = 0; step < 150; ++step) {
    make_batch(tokens, labels);
    model.forward(tokens, batch, true, step);
    loss = model.backward(labels);
    adam.step(model.context());
  }
  EXPECT_LT(loss, 0.1f) << nn::name(precision);
  make_batch(tokens, labels);
  const auto p = model.forward(tokens, batch, false, 0);
  for (int b = 0; b < batch; ++b) EXPECT_EQ(p[b] > 0.5f, labels[b] > 0.5f) << nn::name(precision) << " sample " << b;
}

TEST(SeedClassifier, OverfitsASeparablePatternInFp32) { expect_overfits(Precision::Fp32); }
TEST(SeedClassifier, OverfitsASeparablePatternInBf16) { expect_overfits(Precision::Bf16); }
TEST(SeedClassifier, OverfitsASeparablePatternInFp8) { expect_overfits(Precision::Fp8); }

}  // namespace
}  // namespace fp8kit::models
