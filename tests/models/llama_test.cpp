// The Llama model on the CPU against tests/models/llama_reference.h (double precision, straight from
// HF's formulas): fp32 logits, and every parameter's gradient against central differences of the
// reference's loss; grouped-query, tied and untied heads; bf16 and FP8 near fp32; a few training
// steps lowering the loss; and per-Linear recipes (each Linear as its rule says, mixed delayed, current
// and block Linears training, repeatably).
#include "models/llama.h"

#include "base/error.h"
#include "models/llama_reference.h"
#include "ops/scaling_table.h"
#include "optim/adam.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

namespace fp8kit::models {
namespace {

LlamaConfig tiny(bool tied, int64_t kv_heads) {
  LlamaConfig c;
  c.vocab_size = 37;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = kv_heads;
  c.head_dim = 8;
  c.max_position_embeddings = 16;
  c.rms_norm_eps = 1e-5;
  c.rope_theta = 10000.0;
  c.tie_word_embeddings = tied;
  return c;
}

struct Batch {
  int64_t batch = 2, seq = 11;
  std::vector<int32_t> tokens, targets;
  Tensor tokens_t, targets_t;
  explicit Batch(int64_t vocab, uint64_t seed) {
    std::mt19937 rng(static_cast<uint32_t>(seed));
    for (int64_t i = 0; i < batch * seq; ++i) tokens.push_back(static_cast<int32_t>(rng() % vocab));
    for (int64_t i = 0; i < batch * seq; ++i) targets.push_back(i % 5 == 3 ? -1 : static_cast<int32_t>(rng() % vocab));
    tokens_t = Tensor({batch, seq}, DType::I32);
    tokens_t.copy_from_host(tokens.data());
    targets_t = Tensor({batch * seq}, DType::I32);
    targets_t.copy_from_host(targets.data());
  }
  int64_t counted() const { return std::count_if(targets.begin(), targets.end(), [](int32_t t) { return t >= 0; }); }
};

testing::Weights weights_of(Llama& m) {
  testing::Weights w;
  for (nn::Parameter* p : m.parameters()) {
    const float* v = p->value.data<float>();
    w[p->name].assign(v, v + p->numel());
  }
  return w;
}

class LlamaShapes : public ::testing::TestWithParam<std::tuple<bool, int64_t>> {};

TEST_P(LlamaShapes, Fp32LogitsMatchTheReference) {
  const auto [tied, kv_heads] = GetParam();
  const LlamaConfig config = tiny(tied, kv_heads);
  Llama model(config, 7);
  const Batch b(config.vocab_size, 3);
  const Tensor& logits = model.forward(b.tokens_t, false);
  const testing::Weights w = weights_of(model);
  const std::vector<double> expected = testing::LlamaReference(config, w).logits(b.tokens, b.batch, b.seq);
  ASSERT_EQ(logits.numel(), static_cast<int64_t>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i)
    ASSERT_NEAR(logits.data<float>()[i], expected[i], 1e-5 + 1e-4 * std::abs(expected[i])) << i;
}

TEST_P(LlamaShapes, Fp32GradientsMatchFiniteDifferencesOfTheReference) {
  const auto [tied, kv_heads] = GetParam();
  const LlamaConfig config = tiny(tied, kv_heads);
  Llama model(config, 11);
  // Larger weights than the initialisation's, so that every gradient is well above rounding.
  std::mt19937_64 rng(5);
  for (nn::Parameter* p : model.parameters())
    for (float& v : p->value.span<float>()) v = p->shape.size() == 1 ? 1.0f + 0.3f * ((rng() % 2001) / 1000.0f - 1.0f)
                                                                     : 0.25f * ((rng() % 2001) / 1000.0f - 1.0f);
  const Batch b(config.vocab_size, 4);
  Tensor losses;
  model.forward(b.tokens_t, true);
  model.backward(b.targets_t, 1.0f / static_cast<float>(b.counted()), losses);
  testing::Weights w = weights_of(model);
  const testing::LlamaReference reference(config, w);
  std::mt19937 pick(9);
  for (nn::Parameter* p : model.parameters()) {
    for (int k = 0; k < 6; ++k) {
      const size_t i = pick() % static_cast<size_t>(p->numel());
      std::vector<double>& v = w.at(p->name);
      const double saved = v[i], h = 1e-4;
      v[i] = saved + h;
      const double up = reference.loss(b.tokens, b.targets, b.batch, b.seq);
      v[i] = saved - h;
      const double down = reference.loss(b.tokens, b.targets, b.batch, b.seq);
      v[i] = saved;
      const double fd = (up - down) / (2 * h), analytic = p->grad.data<float>()[i];
      EXPECT_NEAR(analytic, fd, 2e-5 + 2e-3 * std::abs(fd)) << p->name << "[" << i << "]";
    }
  }
  // The mean loss the model reports is the reference's.
  double sum = 0;
  for (float l : losses.span<float>()) sum += l;
  EXPECT_NEAR(sum / static_cast<double>(b.counted()), reference.loss(b.tokens, b.targets, b.batch, b.seq), 1e-5);
}

INSTANTIATE_TEST_SUITE_P(TiedAndGrouped, LlamaShapes,
                         ::testing::Values(std::make_tuple(true, int64_t{4}), std::make_tuple(true, int64_t{2}),
                                           std::make_tuple(false, int64_t{1})));

double mean_loss(Llama& m, const Batch& b, bool train, float scale) {
  Tensor losses;
  m.forward(b.tokens_t, train);
  if (train) {
    m.backward(b.targets_t, scale, losses);
  } else {
    m.loss(b.targets_t, losses);
  }
  double sum = 0;
  for (float l : losses.span<float>()) sum += l;
  return sum / static_cast<double>(b.counted());
}

TEST(Llama, Bf16AndFp8StayNearFp32) {
  const LlamaConfig config = tiny(true, 2);
  const Batch b(config.vocab_size, 6);
  Llama model(config, 13);
  const double fp32 = mean_loss(model, b, false, 1.0f);
  model.set_precision(nn::Precision::Bf16);
  EXPECT_NEAR(mean_loss(model, b, false, 1.0f), fp32, 2e-2);
  model.set_precision(nn::Precision::Fp8);
  // Delayed scaling starts from scale 1; a training forward records the amaxes, then evaluation
  // uses the updated scales.
  mean_loss(model, b, true, 1.0f / static_cast<float>(b.counted()));
  EXPECT_NEAR(mean_loss(model, b, false, 1.0f), fp32, 5e-2);
  EXPECT_EQ(model.fp8_state().size(), 2u * 7u * 3u * 2u);  // layers x projections x slots x (scale, history)
  // Block scaling: current scales of 1 x 128 groups and 128 x 128 blocks, no state.
  model.set_precision(nn::Precision::Fp8, {.mode = ScalingMode::Block});
  EXPECT_NEAR(mean_loss(model, b, false, 1.0f), fp32, 5e-2);
  EXPECT_EQ(model.fp8_state().size(), 0u);
}

TEST(Llama, TrainingLowersTheLossInEveryPrecision) {
  const LlamaConfig config = tiny(true, 2);
  const Batch b(config.vocab_size, 8);
  const Fp8Recipe block{.mode = ScalingMode::Block};
  const std::pair<nn::Precision, const Fp8Recipe*> runs[] = {
      {nn::Precision::Fp32, nullptr}, {nn::Precision::Bf16, nullptr}, {nn::Precision::Fp8, nullptr}, {nn::Precision::Fp8, &block}};
  for (const auto& [precision, recipe] : runs) {
    Llama model(config, 17);
    model.set_precision(precision, recipe != nullptr ? *recipe : Fp8Recipe{});
    optim::Adam adam(model.parameter_set(), {.learning_rate = 1e-2f});
    const float scale = 1.0f / static_cast<float>(b.counted());
    const double first = mean_loss(model, b, true, scale);
    adam.step(model.context());
    double last = first;
    for (int s = 0; s < 30; ++s) {
      last = mean_loss(model, b, true, scale);
      adam.step(model.context());
    }
    EXPECT_LT(last, 0.5 * first) << nn::name(precision) << (recipe != nullptr ? " block" : "");
  }
}

// One training step (forward, backward) of `model` on b; the losses.
std::vector<float> train_step(Llama& m, const Batch& b) {
  Tensor losses;
  m.forward(b.tokens_t, true);
  m.backward(b.targets_t, 1.0f / static_cast<float>(b.counted()), losses);
  return {losses.data<float>(), losses.data<float>() + losses.numel()};
}

std::vector<float> values_of(const Tensor& t) { return {t.data<float>(), t.data<float>() + t.numel()}; }

struct PrecisionRun {
  nn::Precision precision;
  Fp8Recipe recipe;
  std::string name;
};

std::vector<PrecisionRun> precisions() {
  return {{nn::Precision::Fp32, {}, "fp32"},
          {nn::Precision::Bf16, {}, "bf16"},
          {nn::Precision::Fp8, {}, "fp8 delayed"},
          {nn::Precision::Fp8, {.mode = ScalingMode::Current}, "fp8 current"},
          {nn::Precision::Fp8, {.mode = ScalingMode::Block}, "fp8 block"}};
}

double relative_l2(const std::vector<float>& got, const std::vector<float>& expected) {
  double diff = 0, norm = 0;
  for (size_t k = 0; k < expected.size(); ++k) {
    diff += (double{got[k]} - expected[k]) * (double{got[k]} - expected[k]);
    norm += double{expected[k]} * expected[k];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// The loss in chunks of rows against one pass: the same within float32 rounding, not bit for bit. A
// GEMM's rows depend in their last bit on its row count (OpenBLAS's edge kernels; cuBLASLt's choice
// of algorithm), so the chunks' logits and dgrad (the hidden states' gradient) may round differently,
// and the head weight's gradient is the chunks' sum in another order; then carried through the blocks
// (FP8: an output gradient's cast may land on the neighbouring code, hence its looser bound).
TEST(Llama, ChunkedLossMatchesOnePass) {
  for (const bool tied : {true, false}) {
    const LlamaConfig config = tiny(tied, 2);
    const Batch b(config.vocab_size, 21);  // 22 rows: chunks of 8, 7, 7 (at most 8 rows)
    for (const PrecisionRun& run : precisions()) {
      const std::string what = run.name + (tied ? " tied" : " untied");
      const double bound = run.precision == nn::Precision::Fp8 ? 1e-3 : 1e-5;
      Llama whole(config, 23), chunked(config, 23);
      whole.set_memory_options({.loss_chunk_rows = b.batch * b.seq});
      chunked.set_memory_options({.loss_chunk_rows = 8});
      for (Llama* m : {&whole, &chunked}) m->set_precision(run.precision, run.recipe);
      // Evaluation in chunks (evaluate) against forward() and loss().
      Tensor expected_eval, whole_eval, chunked_eval;
      whole.forward(b.tokens_t, false);
      whole.loss(b.targets_t, expected_eval);
      whole.evaluate(b.tokens_t, b.targets_t, whole_eval);
      chunked.evaluate(b.tokens_t, b.targets_t, chunked_eval);
      EXPECT_EQ(values_of(whole_eval), values_of(expected_eval)) << what << ": one chunk, the same bits";
      for (int64_t k = 0; k < expected_eval.numel(); ++k)
        EXPECT_NEAR(chunked_eval.data<float>()[k], expected_eval.data<float>()[k], 1e-6 * expected_eval.data<float>()[k])
            << what;
      EXPECT_EQ(whole.forward(b.tokens_t, true).numel(), b.batch * b.seq * config.vocab_size);
      EXPECT_EQ(chunked.forward(b.tokens_t, true).numel(), 0) << "the head waits for backward()";
      Tensor whole_losses, chunked_losses;
      whole.backward(b.targets_t, 1.0f / static_cast<float>(b.counted()), whole_losses);
      chunked.backward(b.targets_t, 1.0f / static_cast<float>(b.counted()), chunked_losses);
      const std::vector<float> got_losses = values_of(chunked_losses), losses = values_of(whole_losses);
      for (size_t k = 0; k < losses.size(); ++k) EXPECT_NEAR(got_losses[k], losses[k], 1e-6 * losses[k]) << what;
      const std::vector<nn::Parameter*> a = whole.parameters(), c = chunked.parameters();
      double worst = 0;
      for (size_t i = 0; i < a.size(); ++i) {
        const double error = relative_l2(values_of(c[i]->grad), values_of(a[i]->grad));
        EXPECT_LT(error, bound) << what << " " << a[i]->name;
        worst = std::max(worst, error);
      }
      std::printf("%s: worst relative L2 of a gradient %.2e\n", what.c_str(), worst);
      // The FP8 state takes the amaxes of the forward (the same bits) and of the output gradients.
      const std::vector<nn::StateTensor> sa = whole.fp8_state(), sc = chunked.fp8_state();
      ASSERT_EQ(sa.size(), sc.size());
      for (size_t i = 0; i < sa.size(); ++i)
        EXPECT_LT(relative_l2(values_of(*sc[i].tensor), values_of(*sa[i].tensor)), bound) << what << sa[i].name;
      // Evaluation runs the head at once, as before.
      EXPECT_EQ(chunked.forward(b.tokens_t, false).numel(), b.batch * b.seq * config.vocab_size);
    }
  }
}

TEST(Llama, LossAfterAChunkedTrainingForwardSaysWhatToDo) {
  const LlamaConfig config = tiny(true, 2);
  const Batch b(config.vocab_size, 22);
  Llama model(config, 3);
  model.set_memory_options({.loss_chunk_rows = 5});
  model.forward(b.tokens_t, true);
  Tensor losses;
  EXPECT_THROW(model.loss(b.targets_t, losses), Error);
  model.evaluate(b.tokens_t, b.targets_t, losses);
  EXPECT_THROW(model.loss(b.targets_t, losses), Error);
  EXPECT_THROW(model.set_memory_options({.loss_chunk_rows = -1}), Error);
}

TEST(Llama, DefaultLossChunksHoldAbout64MiBOfLogits) {
  EXPECT_EQ(default_loss_chunk_rows(8192), 2048);    // 64 MiB of f32 logits
  EXPECT_EQ(default_loss_chunk_rows(50257), 256);    // 333 rows, rounded down to 256: 49 MiB
  EXPECT_EQ(default_loss_chunk_rows(128256), 256);   // at least 256 rows: 125 MiB
  EXPECT_EQ(default_loss_chunk_rows(37), 453376);    // a tiny vocabulary: one chunk in practice
}

// Recomputation gives the same gradients and FP8 state as keeping the activations, bit for bit, step
// after step (the FP8 scales move between steps, and the recomputed forward must cast with the
// step's and record nothing more), with and without the loss in chunks.
TEST(Llama, RecomputationGivesTheSameBits) {
  const LlamaConfig config = tiny(false, 2);
  const Batch b(config.vocab_size, 25);
  for (const PrecisionRun& run : precisions()) {
    for (const int64_t chunk : {int64_t{0}, int64_t{8}}) {
      const std::string what = run.name + (chunk > 0 ? " chunked" : "");
      Llama kept(config, 29), recomputed(config, 29);
      kept.set_memory_options({.loss_chunk_rows = chunk});
      recomputed.set_memory_options({.loss_chunk_rows = chunk, .recompute = true});
      for (Llama* m : {&kept, &recomputed}) m->set_precision(run.precision, run.recipe);
      for (int step = 0; step < 3; ++step) {
        if (kept.scaling() != nullptr) {  // health statistics on the second step: recorded once
          kept.scaling()->set_recording(step == 1);
          recomputed.scaling()->set_recording(step == 1);
        }
        EXPECT_EQ(train_step(recomputed, b), train_step(kept, b)) << what << " step " << step;
        const std::vector<nn::Parameter*> a = kept.parameters(), c = recomputed.parameters();
        for (size_t i = 0; i < a.size(); ++i)
          EXPECT_EQ(values_of(c[i]->grad), values_of(a[i]->grad)) << what << " " << a[i]->name << " step " << step;
        const std::vector<nn::StateTensor> sa = kept.fp8_state(), sc = recomputed.fp8_state();
        ASSERT_EQ(sa.size(), sc.size());
        for (size_t i = 0; i < sa.size(); ++i)
          EXPECT_EQ(values_of(*sc[i].tensor), values_of(*sa[i].tensor)) << what << " " << sa[i].name;
        if (step == 1 && kept.scaling() != nullptr) {
          const std::vector<ops::QuantStats> ra = kept.scaling()->read_records(kept.context()),
                                             rc = recomputed.scaling()->read_records(recomputed.context());
          ASSERT_EQ(ra.size(), rc.size());
          for (size_t i = 0; i < ra.size(); ++i) EXPECT_EQ(std::memcmp(&ra[i].raw, &rc[i].raw, sizeof(ra[i].raw)), 0) << what << " record " << i;
        }
        // A small step on both, so that the next step's weights and scales differ from this one's.
        for (Llama* m : {&kept, &recomputed})
          for (nn::Parameter* p : m->parameters()) {
            float* v = p->value.data<float>();
            const float* g = p->grad.data<float>();
            for (int64_t k = 0; k < p->numel(); ++k) v[k] -= 0.5f * g[k];
          }
      }
      // Evaluation after recomputed training: the same logits.
      EXPECT_EQ(values_of(recomputed.forward(b.tokens_t, false)), values_of(kept.forward(b.tokens_t, false))) << what;
    }
  }
}

nn::LinearRecipes rules(std::vector<std::string> texts) { return nn::LinearRecipes::parse(texts); }

// The slots of the scaling table whose names start with `module` + "/", and whether they scale currently.
std::vector<bool> slots_of(Llama& m, const std::string& module) {
  std::vector<bool> current;
  const ops::ScalingTable* t = m.scaling();
  if (t == nullptr) return current;
  for (int i = 0; i < t->size(); ++i)
    if (t->name(i).rfind(module + "/", 0) == 0) current.push_back(t->current(i));
  return current;
}

ops::LinearPrecision precision_of(Llama& m, const std::string& path) {
  for (nn::Linear* l : m.linears())
    if (l->path() == path) return l->precision();
  ADD_FAILURE() << "no Linear " << path;
  return ops::LinearPrecision::Fp32;
}

// Training losses of `steps` steps of a fresh model in `precision` with `linears`.
std::vector<double> train_losses(nn::Precision precision, const Fp8Recipe& recipe, const nn::LinearRecipes& linears,
                                 int steps) {
  const LlamaConfig config = tiny(false, 2);
  const Batch b(config.vocab_size, 8);
  Llama model(config, 17);
  model.set_precision(precision, recipe, linears);
  optim::Adam adam(model.parameter_set(), {.learning_rate = 1e-2f});
  std::vector<double> losses;
  for (int s = 0; s < steps; ++s) {
    losses.push_back(mean_loss(model, b, true, 1.0f / static_cast<float>(b.counted())));
    adam.step(model.context());
  }
  return losses;
}

TEST(LlamaLinearRecipes, EachLinearRunsWhatItsRuleSays) {
  Llama model(tiny(false, 2), 3);
  model.set_precision(nn::Precision::Fp8, {},
                      rules({"model.layers.*.mlp.down_proj=bf16", "lm_head=fp8", "model.layers.0.self_attn.*=block",
                             "model.layers.1.self_attn.k_proj=current", "model.layers.1.mlp.gate_proj=fp32"}));
  using P = ops::LinearPrecision;
  EXPECT_EQ(precision_of(model, "model.layers.0.mlp.down_proj"), P::Bf16);
  EXPECT_EQ(precision_of(model, "model.layers.1.mlp.down_proj"), P::Bf16);
  EXPECT_EQ(precision_of(model, "model.layers.0.self_attn.q_proj"), P::Fp8Block);
  EXPECT_EQ(precision_of(model, "model.layers.0.self_attn.o_proj"), P::Fp8Block);
  EXPECT_EQ(precision_of(model, "model.layers.1.self_attn.q_proj"), P::Fp8);
  EXPECT_EQ(precision_of(model, "model.layers.1.mlp.gate_proj"), P::Fp32);
  EXPECT_EQ(precision_of(model, "lm_head"), P::Fp8);
  // bf16 and block Linears keep no slots; per-tensor FP8 ones three, each slot with its Linear's mode.
  EXPECT_TRUE(slots_of(model, "model.layers.0.mlp.down_proj").empty());
  EXPECT_TRUE(slots_of(model, "model.layers.0.self_attn.q_proj").empty());
  EXPECT_EQ(slots_of(model, "lm_head"), std::vector<bool>({false, false, false}));
  EXPECT_EQ(slots_of(model, "model.layers.1.self_attn.q_proj"), std::vector<bool>({false, false, false}));
  EXPECT_EQ(slots_of(model, "model.layers.1.self_attn.k_proj"), std::vector<bool>({true, true, true}));
  // layer 0: gate, up; layer 1: q, k, v, o, up (gate fp32, down bf16); the head.
  EXPECT_EQ(model.scaling()->size(), 3 * (2 + 5 + 1));
  EXPECT_EQ(model.fp8_state().size(), 2u * model.scaling()->size());

  // The default policy without rules: FP8 projections, a bf16 head; a bf16 model's FP8 head.
  model.set_precision(nn::Precision::Fp8);
  EXPECT_EQ(precision_of(model, "lm_head"), P::Bf16);
  EXPECT_EQ(model.scaling()->size(), 3 * 7 * 2);
  model.set_precision(nn::Precision::Bf16, {.mode = ScalingMode::Current}, rules({"lm_head=fp8"}));
  EXPECT_EQ(precision_of(model, "model.layers.0.mlp.up_proj"), P::Bf16);
  EXPECT_EQ(slots_of(model, "lm_head"), std::vector<bool>({true, true, true}));
  EXPECT_EQ(model.scaling()->size(), 3);
  model.set_precision(nn::Precision::Bf16, {}, rules({"lm_head=bf16"}));
  EXPECT_EQ(model.scaling(), nullptr);
}

// Block-scaled key and value projections take query's 1 x 128 quantizations of x, and up_proj
// gate_proj's (input_of, as bf16 shares its cast on the GPU): the same bytes as their own, so a step
// gives the same losses and gradients bit for bit as Linears quantizing x each for itself.
TEST(Llama, BlockScaledProjectionsShareTheirInputsQuantizations) {
  const LlamaConfig config = tiny(false, 2);
  const Batch b(config.vocab_size, 8);
  auto step = [&](bool share) {
    Llama model(config, 21);
    model.set_precision(nn::Precision::Fp8, {.mode = ScalingMode::Block});
    int shared = 0;
    for (nn::Linear* l : model.linears()) {
      shared += l->op().input_of != nullptr;
      if (!share) l->op().input_of = nullptr;
    }
    EXPECT_EQ(shared, 2 * 3);  // per layer: key, value, up
    Tensor losses;
    model.forward(b.tokens_t, true);
    model.backward(b.targets_t, 1.0f / static_cast<float>(b.counted()), losses);
    const Tensor& g = model.parameter_set().grads();
    std::vector<float> out(losses.span<float>().begin(), losses.span<float>().end());
    out.insert(out.end(), g.data<float>(), g.data<float>() + g.numel());
    return out;
  };
  const std::vector<float> shared = step(true), own = step(false);
  ASSERT_EQ(shared.size(), own.size());
  EXPECT_EQ(std::memcmp(shared.data(), own.data(), shared.size() * sizeof(float)), 0);
  // Mixed recipes share only between Linears that quantize alike.
  Llama model(config, 21);
  model.set_precision(nn::Precision::Fp8, {}, rules({"*.self_attn.*=block", "*.v_proj=bf16", "*.up_proj=block"}));
  for (nn::Linear* l : model.linears()) {
    const std::string name = l->name();
    EXPECT_EQ(l->op().input_of != nullptr, name == "k_proj") << l->path();
  }
}

// FP8 projections with delayed scaling (te and keras lag): key and value take query's cast of x, and
// up_proj gate_proj's (input_of), their input slots the owner's amax: three training steps give the same
// losses, weights, scaling state (amax histories, scales) and health statistics bit for bit as Linears
// casting x each for itself, with and without recomputation (whose replayed forwards record nothing).
// Hidden 160: shapes the GPU does not quantize and multiply in one launch (narrow ones share nothing).
TEST(Llama, Fp8DelayedProjectionsShareTheirInputsQuantizations) {
  LlamaConfig config = tiny(false, 2);
  config.hidden_size = 160;
  const Batch b(config.vocab_size, 8);
  auto train = [&](const Fp8Recipe& recipe, bool recompute, bool share) {
    Llama model(config, 21);
    model.set_precision(nn::Precision::Fp8, recipe);
    model.set_memory_options({.recompute = recompute});
    model.scaling()->set_recording(true);
    int shared = 0;
    for (nn::Linear* l : model.linears()) {
      shared += l->op().input_of != nullptr;
      if (!share) l->op().input_of = nullptr;
    }
    EXPECT_EQ(shared, 2 * 3);  // per layer: key, value, up
    optim::Adam adam(model.parameter_set(), {.learning_rate = 1e-2f});
    std::vector<float> out;
    for (int s = 0; s < 3; ++s) {
      Tensor losses;
      model.forward(b.tokens_t, true);
      model.backward(b.targets_t, 1.0f / static_cast<float>(b.counted()), losses);
      adam.step(model.context());
      out.insert(out.end(), losses.span<float>().begin(), losses.span<float>().end());
    }
    const Tensor& w = model.parameter_set().values();
    out.insert(out.end(), w.data<float>(), w.data<float>() + w.numel());
    for (const nn::StateTensor& t : model.fp8_state())
      out.insert(out.end(), t.tensor->data<float>(), t.tensor->data<float>() + t.tensor->numel());
    for (const ops::QuantStats& q : model.scaling()->read_records(model.context())) {
      float words[ops::kQuantStatsWords];
      std::memcpy(words, &q.raw, sizeof(words));
      out.insert(out.end(), words, words + ops::kQuantStatsWords);
    }
    return out;
  };
  for (const ScalingLag lag : {ScalingLag::Te, ScalingLag::Keras}) {
    const Fp8Recipe recipe{.lag = lag, .amax_history_length = 4};
    for (const bool recompute : {false, true}) {
      const std::vector<float> shared = train(recipe, recompute, true), own = train(recipe, recompute, false);
      ASSERT_EQ(shared.size(), own.size());
      EXPECT_EQ(std::memcmp(shared.data(), own.data(), shared.size() * sizeof(float)), 0)
          << (lag == ScalingLag::Te ? "te" : "keras") << " lag, recompute " << recompute;
    }
  }
  // Current scaling computes each Linear's scale from x in a pass of its own: nothing shared.
  Llama model(config, 21);
  model.set_precision(nn::Precision::Fp8, {}, rules({"*.k_proj=current", "*.mlp.*=current"}));
  for (nn::Linear* l : model.linears())
    EXPECT_EQ(l->op().input_of != nullptr, l->name() == "v_proj") << l->path();
}

TEST(LlamaLinearRecipes, MixedDelayedCurrentAndBlockLinearsTrainRepeatably) {
  const nn::LinearRecipes mixed = rules({"*.self_attn.*=current", "*.mlp.*=block", "model.layers.1.mlp.down_proj=delayed",
                                         "*.k_proj=bf16", "lm_head=delayed", "model.layers.0.mlp.up_proj=fp32"});
  for (const ScalingLag lag : {ScalingLag::Te, ScalingLag::Keras}) {
    const Fp8Recipe recipe{.lag = lag, .amax_history_length = 4};
    const std::vector<double> losses = train_losses(nn::Precision::Fp8, recipe, mixed, 12);
    for (double l : losses) ASSERT_TRUE(std::isfinite(l)) << l;
    EXPECT_LT(losses.back(), 0.7 * losses.front());
    EXPECT_EQ(train_losses(nn::Precision::Fp8, recipe, mixed, 12), losses);  // bit for bit
    // Different rules are a different model: the rules take effect.
    EXPECT_NE(train_losses(nn::Precision::Fp8, recipe, {}, 12), losses);
  }
}

TEST(LlamaLinearRecipes, APatternMatchingNoLinearIsRefused) {
  Llama model(tiny(true, 2), 3);
  try {
    model.set_precision(nn::Precision::Fp8, {}, rules({"lm_head=bf16", "model.layers.*.mlp.down=bf16"}));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("pattern 'model.layers.*.mlp.down' matches no Linear"));
  }
}

}  // namespace
}  // namespace fp8kit::models
