// The LM training loop on the CPU with a tiny Llama and a synthetic corpus: the loss falls on a
// learnable stream; a run stopped at a checkpoint and resumed ends with the weights of an
// uninterrupted one, bit for bit (per-Linear recipes too); accumulating two micro-batches matches one
// batch of both; recomputation and the loss in chunks train the same model; a checkpoint of another
// configuration (or other per-Linear recipes) is refused; the saved HF directory loads back.
#include "train/lm_trainer.h"

#include "base/error.h"
#include "common/error_of.h"
#include "common/temp_dir.h"
#include "common/tiny_llama.h"
#include "models/llama_io.h"

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace fp8kit::train {
namespace {

LmTrainOptions options(const std::filesystem::path& out) {
  LmTrainOptions o;
  o.model = testing::tiny_llama();
  o.precision = nn::Precision::Fp32;
  o.seq = 16;
  o.batch = 4;
  o.steps = 6;
  o.adam.learning_rate = 1e-2f;
  o.adam.warmup_steps = 2;
  o.eval_batches = 2;
  o.out = out;
  o.console = nullptr;
  return o;
}

std::vector<float> weights(models::Llama& m) {
  const Tensor w = m.parameter_set().values().to(Device::Cpu);
  return {w.data<float>(), w.data<float>() + w.numel()};
}

TEST(LmTrainer, LossFallsOnALearnableStream) {
  const auto train = testing::learnable_stream(4000, 1), validation = testing::learnable_stream(1000, 2);
  testing::TempDir dir("lm_loss");
  LmTrainOptions o = options(dir.path());
  o.steps = 40;
  o.eval_batches = 0;

  LmTrainOptions untrained = o;
  untrained.steps = 0;
  const double before = train_lm(untrained, train, validation).validation->loss;
  const LmTrainResult r = train_lm(o, train, validation);
  EXPECT_LT(r.validation->loss, before - 1.0) << before;
  EXPECT_NEAR(r.validation->perplexity, std::exp(r.validation->loss), 1e-9);
}

TEST(LmTrainer, ResumeContinuesExactly) {
  const auto train = testing::learnable_stream(3000, 3), validation = testing::learnable_stream(600, 4);
  for (nn::Precision precision : {nn::Precision::Fp32, nn::Precision::Fp8}) {
    testing::TempDir straight("lm_straight"), stopped("lm_stopped");
    LmTrainOptions o = options(straight.path());
    o.precision = precision;
    LmTrainResult full = train_lm(o, train, validation);
    o.out = stopped.path();
    o.checkpoint_every = 3;
    o.steps = 3;
    o.adam.decay_steps = 6;  // the schedule of the full run
    train_lm(o, train, validation);
    o.steps = 6;
    o.resume = true;
    LmTrainOptions full_schedule = o;
    LmTrainResult resumed = train_lm(full_schedule, train, validation);
    // The uninterrupted run's schedule decays over its 6 steps too.
    EXPECT_EQ(weights(resumed.model), weights(full.model)) << nn::name(precision);
  }
}

// Delayed (keras lag), current and block Linears and a bf16 one in one model, and an FP8 head in a bf16
// model: the scaling state of each, saved by module path, resumes exactly.
TEST(LmTrainer, ResumeContinuesExactlyWithPerLinearRecipes) {
  const auto train = testing::learnable_stream(3000, 3), validation = testing::learnable_stream(600, 4);
  const std::vector<std::string> mixed = {"*.mlp.*=current", "model.layers.0.self_attn.*=block", "*.down_proj=bf16",
                                          "lm_head=fp8"};
  for (nn::Precision precision : {nn::Precision::Fp8, nn::Precision::Bf16}) {
    testing::TempDir straight("lm_rules_straight"), stopped("lm_rules_stopped");
    LmTrainOptions o = options(straight.path());
    o.precision = precision;
    o.recipe = {.lag = ScalingLag::Keras, .amax_history_length = 4};
    o.linears = nn::LinearRecipes::parse(precision == nn::Precision::Fp8 ? mixed : std::vector<std::string>{"lm_head=fp8"});
    LmTrainResult full = train_lm(o, train, validation);
    ASSERT_NE(full.model.scaling(), nullptr);
    o.out = stopped.path();
    o.checkpoint_every = 3;
    o.steps = 3;
    o.adam.decay_steps = 6;
    train_lm(o, train, validation);
    o.steps = 6;
    o.resume = true;
    LmTrainResult resumed = train_lm(o, train, validation);
    EXPECT_EQ(weights(resumed.model), weights(full.model)) << nn::name(precision);
  }
}

TEST(LmTrainer, RefusesACheckpointOfOtherPerLinearRecipes) {
  const auto train = testing::learnable_stream(3000, 7), validation = testing::learnable_stream(600, 8);
  testing::TempDir dir("lm_rules_refuse");
  LmTrainOptions o = options(dir.path());
  o.precision = nn::Precision::Fp8;
  o.steps = 2;
  o.linears = nn::LinearRecipes::parse(std::vector<std::string>{"*.down_proj=current"});
  train_lm(o, train, validation);
  o.resume = true;
  o.linears = nn::LinearRecipes::parse(std::vector<std::string>{"*.down_proj=delayed"});
  try {
    train_lm(o, train, validation);
    FAIL() << "resumed a checkpoint of other per-Linear recipes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--linear-recipe"), std::string::npos) << e.what();
  }
}

TEST(LmTrainer, AccumulationMatchesOneLargerBatch) {
  const auto train = testing::learnable_stream(3000, 5), validation = testing::learnable_stream(600, 6);
  testing::TempDir a("lm_acc"), b("lm_big");
  LmTrainOptions o = options(a.path());
  o.steps = 2;
  o.batch = 2;
  o.accumulation = 2;
  LmTrainResult accumulated = train_lm(o, train, validation);
  o.out = b.path();
  o.batch = 4;
  o.accumulation = 1;
  LmTrainResult big = train_lm(o, train, validation);
  const auto wa = weights(accumulated.model), wb = weights(big.model);
  for (size_t i = 0; i < wa.size(); ++i) ASSERT_NEAR(wa[i], wb[i], 1e-5) << i;
}

// The memory options through the whole loop (accumulation, clipping, AdamW, FP8 scaling, validation):
// recomputation trains the same weights bit for bit; the loss in chunks the same within float32
// rounding (Llama.ChunkedLossMatchesOnePass says why).
TEST(LmTrainer, MemoryOptionsTrainTheSameModel) {
  const auto train = testing::learnable_stream(3000, 7), validation = testing::learnable_stream(600, 8);
  for (nn::Precision precision : {nn::Precision::Bf16, nn::Precision::Fp8}) {
    testing::TempDir dir("lm_memory");
    LmTrainOptions o = options(dir.path());
    o.precision = precision;
    o.steps = 3;
    o.accumulation = 2;
    auto trained = [&](models::LlamaMemoryOptions memory) {
      o.memory = memory;
      return train_lm(o, train, validation);
    };
    LmTrainResult plain = trained({.loss_chunk_rows = 1 << 20});
    LmTrainResult recomputed = trained({.loss_chunk_rows = 1 << 20, .recompute = true});
    EXPECT_EQ(weights(recomputed.model), weights(plain.model)) << nn::name(precision);
    EXPECT_EQ(recomputed.validation->loss, plain.validation->loss) << nn::name(precision);
    LmTrainResult chunked = trained({.loss_chunk_rows = 16});  // 64 rows per micro-batch: 4 chunks
    LmTrainResult both = trained({.loss_chunk_rows = 16, .recompute = true});
    EXPECT_EQ(weights(both.model), weights(chunked.model)) << nn::name(precision);
    const auto wc = weights(chunked.model), wp = weights(plain.model);
    for (size_t i = 0; i < wc.size(); ++i) ASSERT_NEAR(wc[i], wp[i], 1e-4) << nn::name(precision) << " " << i;
    EXPECT_NEAR(chunked.validation->loss, plain.validation->loss, 1e-4) << nn::name(precision);
  }
}

TEST(LmTrainer, RefusesACheckpointOfAnotherRunAndSavesALoadableModel) {
  const auto train = testing::learnable_stream(3000, 7), validation = testing::learnable_stream(600, 8);
  testing::TempDir dir("lm_refuse");
  LmTrainOptions o = options(dir.path());
  o.steps = 2;
  LmTrainResult r = train_lm(o, train, validation);
  o.resume = true;
  o.steps = 1;  // before the checkpoint's step: refused, no validation of step 1 logged
  EXPECT_EQ(testing::error_of([&] { train_lm(o, train, validation); }),
            (dir.path() / "checkpoint-fp32.safetensors").string() +
                " is at step 2, past --steps 1: pass --steps 3 or more to train on");
  o.steps = 2;
  o.seed = 1;
  EXPECT_THROW(train_lm(o, train, validation), Error);
  models::save_pretrained(r.model, dir.path() / "model");
  models::Llama loaded = models::load_pretrained(dir.path() / "model");
  // Saved as BF16: the loaded weights are the trained ones rounded to bf16.
  const auto w = weights(r.model), l = weights(loaded);
  ASSERT_EQ(w.size(), l.size());
  for (size_t i = 0; i < w.size(); ++i) ASSERT_NEAR(l[i], w[i], std::abs(w[i]) * 0x1p-8 + 1e-30) << i;
}

}  // namespace
}  // namespace fp8kit::train
