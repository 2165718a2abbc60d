// The inference engine on the CPU: its bf16 prefill against the training model's bf16 forward (the
// same weights), decode steps against prefills of the whole sequence, prompts of different lengths
// prefilled together against each alone, the FP8 KV cache near the bf16 one, generation against a
// hand-run greedy loop, calibration's records, and its refusals.
#include "infer/generate.h"
#include "infer/llama_engine.h"
#include "models/llama.h"
#include "models/llama_io.h"
#include "quant/pack.h"

#include "common/error_of.h"
#include "common/host_tensors.h"
#include "common/temp_dir.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

namespace fp8kit::infer {
namespace {

using testing::error_of;
using testing::float_values;

models::LlamaConfig tiny_config() {
  models::LlamaConfig c;
  c.vocab_size = 61;
  c.hidden_size = 64;
  c.intermediate_size = 96;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 64;
  c.tie_word_embeddings = false;
  return c;
}

// A saved random model (bf16 weights), and the training model loaded back from it.
struct SavedModel {
  testing::TempDir dir{"engine"};
  models::Llama reference;
  explicit SavedModel(const models::LlamaConfig& config) : reference(config, 3) {
    models::save_pretrained(reference, dir.path());
    reference = models::load_pretrained(dir.path());
    reference.set_precision(nn::Precision::Bf16);
  }
};

std::vector<int32_t> random_tokens(int64_t n, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (int32_t& id : t) id = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab));
  return t;
}

double max_abs_diff(std::span<const float> a, std::span<const float> b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(static_cast<double>(a[i]) - b[i]));
  return m;
}

TEST(LlamaEngine, Bf16PrefillMatchesTheTrainingModelsBf16Forward) {
  SavedModel saved(tiny_config());
  const int64_t batch = 2, seq = 13;
  const std::vector<int32_t> tokens = random_tokens(batch * seq, 61, 1);
  LlamaEngine engine = LlamaEngine::from_hf(saved.dir.path(), Device::Cpu, {.max_batch = 2, .max_seq = 32});
  const std::vector<float> got = float_values(engine.prefill(tokens, batch, seq, 0, true));
  Tensor t({batch, seq}, DType::I32);
  std::copy(tokens.begin(), tokens.end(), t.data<int32_t>());
  const std::vector<float> want = float_values(saved.reference.forward(t, false));
  ASSERT_EQ(got.size(), want.size());
  // The same bf16 rounding points but for the projections' outputs (bf16 here, float32 there).
  EXPECT_LT(max_abs_diff(got, want), 0.02);
  // Last positions only: the rows of every sequence's last token (the LM head's GEMM of other shape
  // sums in another order).
  const std::vector<float> last = float_values(engine.prefill(tokens, batch, seq));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t v = 0; v < 61; ++v)
      EXPECT_NEAR(last[static_cast<size_t>(b * 61 + v)], got[static_cast<size_t>((b * seq + seq - 1) * 61 + v)], 1e-5);
}

TEST(LlamaEngine, DecodeStepsContinueAPrefillAsAPrefillOfTheWholeSequenceWould) {
  SavedModel saved(tiny_config());
  for (DType kv : {DType::Bf16, DType::E4M3}) {
    const EngineOptions o{.max_batch = 3, .max_seq = 32, .kv_cache = kv, .default_kv_scale = 0.01f};
    LlamaEngine engine = LlamaEngine::from_hf(saved.dir.path(), Device::Cpu, o);
    const std::vector<int32_t> all = random_tokens(3 * 12, 61, 2);
    // Three sequences of 9 prompt tokens, then 3 decode steps.
    std::vector<int32_t> prompts;
    for (int64_t b = 0; b < 3; ++b) prompts.insert(prompts.end(), all.begin() + b * 12, all.begin() + b * 12 + 9);
    engine.prefill(prompts, 3, 9);
    std::vector<float> stepped;
    for (int64_t t = 9; t < 12; ++t) {
      const std::vector<int32_t> next{all[static_cast<size_t>(t)], all[static_cast<size_t>(12 + t)],
                                      all[static_cast<size_t>(24 + t)]};
      stepped = float_values(engine.decode(next));
    }
    EXPECT_EQ(engine.slot_length(0), 12);
    const std::vector<float> whole = float_values(engine.prefill(all, 3, 12));
    EXPECT_LT(max_abs_diff(stepped, whole), 0.03) << name(kv);
  }
}

// Prompts of different lengths prefilled in one forward: the logits of each prompt prefilled alone,
// the same bits (every GEMM row and the attention sum as they would alone), and the KV cache those
// prefills leave: the decode steps after them agree to the bit too.
TEST(LlamaEngine, PromptsOfDifferentLengthsPrefillTogetherAsEachAlone) {
  SavedModel saved(tiny_config());
  const std::vector<std::vector<int32_t>> prompts{random_tokens(5, 61, 11), random_tokens(1, 61, 12),
                                                  random_tokens(9, 61, 13)};
  for (DType kv : {DType::Bf16, DType::E4M3}) {
    const EngineOptions o{.max_batch = 4, .max_seq = 32, .kv_cache = kv, .default_kv_scale = 0.01f};
    LlamaEngine together = LlamaEngine::from_hf(saved.dir.path(), Device::Cpu, o);
    LlamaEngine alone = LlamaEngine::from_hf(saved.dir.path(), Device::Cpu, o);
    const std::vector<float> got = float_values(together.prefill(prompts));
    std::vector<float> want, want_all;
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto n = static_cast<int64_t>(prompts[i].size());
      const std::vector<float> all = float_values(alone.prefill(prompts[i], 1, n, 3, true));  // (slot 3: unused)
      want_all.insert(want_all.end(), all.begin(), all.end());
      const std::vector<float> last = float_values(alone.prefill(prompts[i], 1, n, static_cast<int64_t>(i)));
      want.insert(want.end(), last.begin(), last.end());
      EXPECT_EQ(together.slot_length(static_cast<int64_t>(i)), n);
    }
    EXPECT_EQ(got, want) << name(kv);
    for (int step = 0; step < 3; ++step) {
      const std::vector<int32_t> next = random_tokens(3, 61, 14 + static_cast<uint32_t>(step));
      EXPECT_EQ(float_values(together.decode(next)), float_values(alone.decode(next))) << name(kv) << " " << step;
    }
    // Every position's logits, prompt after prompt, into slots from 1 on (the LM head's GEMM of other
    // shape sums in another order).
    EXPECT_LT(max_abs_diff(float_values(together.prefill(prompts, 1, true)), want_all), 1e-5) << name(kv);
    EXPECT_EQ(together.slot_length(3), 9);
  }
}

TEST(LlamaEngine, AnFp8KvCacheStaysNearTheBf16One) {
  SavedModel saved(tiny_config());
  const std::vector<int32_t> tokens = random_tokens(2 * 16, 61, 3);
  LlamaEngine bf16 = LlamaEngine::from_hf(saved.dir.path(), Device::Cpu, {.max_batch = 2, .max_seq = 16});
  const EngineOptions o{.max_batch = 2, .max_seq = 16, .kv_cache = DType::E4M3, .default_kv_scale = 0.01f};
  LlamaEngine fp8 = LlamaEngine::from_hf(saved.dir.path(), Device::Cpu, o);
  const std::vector<float> a = float_values(bf16.prefill(tokens, 2, 16, 0, true));
  const std::vector<float> b = float_values(fp8.prefill(tokens, 2, 16, 0, true));
  const double diff = max_abs_diff(a, b);
  EXPECT_GT(diff, 0.0);  // the cache is quantized
  EXPECT_LT(diff, 0.05);
  EXPECT_EQ(fp8.kv_cache_bytes() * 2, bf16.kv_cache_bytes());
}

TEST(LlamaEngine, GreedyGenerationIsTheArgmaxOfEachStep) {
  SavedModel saved(tiny_config());
  LlamaEngine engine = LlamaEngine::from_hf(saved.dir.path(), Device::Cpu, {.max_batch = 2, .max_seq = 40});
  const std::vector<std::vector<int32_t>> prompts{random_tokens(5, 61, 4), random_tokens(8, 61, 5)};
  std::vector<std::pair<size_t, int32_t>> streamed;
  const auto out = generate(engine, prompts, {.max_new_tokens = 6},
                            [&](size_t i, int32_t token) { streamed.emplace_back(i, token); });
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(streamed.size(), 12u);
  for (size_t i = 0; i < prompts.size(); ++i) {
    ASSERT_EQ(out[i].size(), 6u);
    std::vector<int32_t> seq = prompts[i];
    for (int32_t expected : out[i]) {  // re-prefill the whole sequence for every token
      const Tensor& logits = engine.prefill(seq, 1, static_cast<int64_t>(seq.size()));
      EXPECT_EQ(engine.argmax(logits)[0], expected);
      seq.push_back(expected);
    }
  }
}

TEST(LlamaEngine, GenerationSplitsItsPrefillByTheTokenBudgetWithTheSameTokens) {
  SavedModel saved(tiny_config());
  LlamaEngine engine = LlamaEngine::from_hf(saved.dir.path(), Device::Cpu, {.max_batch = 3, .max_seq = 40});
  const std::vector<std::vector<int32_t>> prompts{random_tokens(5, 61, 4), random_tokens(8, 61, 5),
                                                  random_tokens(3, 61, 6)};
  const GenerationOptions together{.max_new_tokens = 5, .sampling = {.temperature = 0.8f, .seed = 3}};
  GenerationOptions split = together;
  split.prefill_tokens = 9;  // {5}, then {8}, then {3}: a forward each
  EXPECT_EQ(generate(engine, prompts, together), generate(engine, prompts, split));
  split.prefill_tokens = 0;  // every prompt alone
  EXPECT_EQ(generate(engine, prompts, together), generate(engine, prompts, split));
}

TEST(LlamaEngine, CalibrationRecordsEveryProjectionInputAndTheKvCache) {
  SavedModel saved(tiny_config());
  LlamaEngine engine = LlamaEngine::from_hf(saved.dir.path(), Device::Cpu, {.max_batch = 2, .max_seq = 16});
  quant::CalibrationStats stats;
  engine.record_calibration(&stats);
  engine.prefill(random_tokens(2 * 16, 61, 6), 2, 16);
  engine.prefill(random_tokens(7, 61, 7), 1, 7);
  engine.prefill(std::vector<std::vector<int32_t>>{random_tokens(3, 61, 8), random_tokens(4, 61, 9)});
  engine.record_calibration(nullptr);
  EXPECT_EQ(stats.prompts, 5);
  EXPECT_EQ(stats.tokens, 46);  // a ragged prefill's padding is not recorded
  for (const char* name : {"q_proj", "k_proj", "v_proj", "o_proj", "k_cache", "v_cache"}) {
    const auto it = stats.activations.find(std::string("model.layers.1.self_attn.") + name);
    ASSERT_NE(it, stats.activations.end()) << name;
    EXPECT_GT(it->second.amax(), 0.0f) << name;
    uint64_t counted = 0;
    for (uint64_t n : it->second.histogram) counted += n;
    const uint64_t channels = it->second.channel_amax.size();
    EXPECT_EQ(counted, 46 * channels) << name;
  }
  for (const char* name : {"gate_proj", "up_proj", "down_proj"})
    EXPECT_EQ(stats.activations.count(std::string("model.layers.0.mlp.") + name), 1u) << name;
  EXPECT_EQ(stats.activations.at("model.layers.0.mlp.down_proj").channel_amax.size(), 96u);
  EXPECT_EQ(stats.activations.at("model.layers.0.self_attn.q_proj").amax(),
            stats.activations.at("model.layers.0.self_attn.v_proj").amax());
}

// Random weights: FP8 (per tensor or per channel, scales per token, or frozen after a warm-up) near the
// bf16 engine of the same draw.
TEST(LlamaEngine, Fp8WeightsStayNearTheirBf16Draw) {
  const models::LlamaConfig config = tiny_config();
  const std::vector<int32_t> tokens = random_tokens(2 * 12, 61, 8);
  LlamaEngine bf16 = LlamaEngine::random(config, {}, 5, Device::Cpu, {.max_batch = 2, .max_seq = 16});
  EXPECT_FALSE(bf16.fp8_weights());
  const std::vector<float> want = float_values(bf16.prefill(tokens, 2, 12, 0, true));
  double spread = 0;
  for (float v : want) spread = std::max(spread, std::abs(static_cast<double>(v)));
  for (Granularity g : {Granularity::PerTensor, Granularity::PerRow}) {
    for (ActivationScaling s : {ActivationScaling::Dynamic, ActivationScaling::WarmUp}) {
      LlamaEngine fp8 = LlamaEngine::random(config, {.fp8 = true, .granularity = g}, 5, Device::Cpu,
                                            {.max_batch = 2, .max_seq = 16, .activations = s, .warm_up_passes = 2});
      EXPECT_TRUE(fp8.fp8_weights());
      EXPECT_LT(fp8.weight_bytes(), bf16.weight_bytes());
      for (int pass = 0; pass < 3; ++pass) {  // WarmUp: two passes per token, then static scales
        const std::vector<float> got = float_values(fp8.prefill(tokens, 2, 12, 0, true));
        EXPECT_LT(max_abs_diff(got, want), 0.1 * spread) << name(g) << " pass " << pass;
        EXPECT_GT(max_abs_diff(got, want), 0.0);
      }
    }
  }
  EXPECT_EQ(error_of([&] {
              (void)LlamaEngine::random(config, {.fp8 = true}, 5, Device::Cpu,
                                        {.max_seq = 16, .activations = ActivationScaling::Static});
            }),
            "static activation scales need a model packed with input_scale (calibrate, then pack with "
            "--activations static), or use dynamic or warm-up scaling");
}

// A warm-up that ends at a decode step: that step's logits are those of per-token scales (the warm-up
// quantizes per token; its buffers outlive the freeze), and decoding goes on at the frozen scales.
TEST(LlamaEngine, WarmUpEndingAtADecodeStepKeepsItsLogits) {
  const models::LlamaConfig config = tiny_config();
  const EngineOptions options{.max_batch = 2, .max_seq = 16, .activations = ActivationScaling::Dynamic};
  EngineOptions warm_options = options;
  warm_options.activations = ActivationScaling::WarmUp;
  warm_options.warm_up_passes = 2;
  LlamaEngine dynamic = LlamaEngine::random(config, {.fp8 = true}, 5, Device::Cpu, options);
  LlamaEngine warm = LlamaEngine::random(config, {.fp8 = true}, 5, Device::Cpu, warm_options);
  const std::vector<int32_t> prompt = random_tokens(2 * 6, 61, 11);
  const std::vector<int32_t> next = dynamic.argmax(dynamic.prefill(prompt, 2, 6));
  EXPECT_EQ(warm.argmax(warm.prefill(prompt, 2, 6)), next);  // warm-up pass 1
  const Tensor& logits = dynamic.decode(next);
  const std::vector<float> want = float_values(logits);
  const std::vector<int32_t> after = dynamic.argmax(logits);
  EXPECT_EQ(float_values(warm.decode(next)), want);  // pass 2, then the scales freeze
  const std::vector<float> frozen = float_values(warm.decode(after));
  double spread = 0;
  for (float v : want) spread = std::max(spread, std::abs(static_cast<double>(v)));
  EXPECT_LT(max_abs_diff(frozen, float_values(dynamic.decode(after))), 0.1 * spread);
}

// The pipeline: calibrate the bf16 model through the engine, pack it (per tensor, per channel, 128x128
// blocks; static or dynamic activations; FP8 KV cache scales), serve the packed directory.
TEST(LlamaEngine, ServesWhatItCalibratedAndPacked) {
  models::LlamaConfig config = tiny_config();
  config.hidden_size = 128;  // 128x128 blocks: every fused part ends on a block boundary
  config.intermediate_size = 256;
  config.head_dim = 32;
  config.num_key_value_heads = 4;
  SavedModel saved(config);
  const std::vector<int32_t> tokens = random_tokens(2 * 16, 61, 9);
  LlamaEngine bf16 = LlamaEngine::open(saved.dir.path(), Device::Cpu, {.max_batch = 2, .max_seq = 16});
  quant::CalibrationStats stats;
  bf16.record_calibration(&stats);
  bf16.prefill(random_tokens(2 * 16, 61, 10), 2, 16);
  bf16.record_calibration(nullptr);
  const std::vector<float> want = float_values(bf16.prefill(tokens, 2, 16, 0, true));
  double spread = 0;
  for (float v : want) spread = std::max(spread, std::abs(static_cast<double>(v)));

  struct Case {
    Granularity weights;
    bool static_activations;
  };
  for (const Case& k : {Case{Granularity::PerTensor, true}, Case{Granularity::PerRow, true},
                        Case{Granularity::PerTensor, false}, Case{Granularity::Block128x128, false}}) {
    const testing::TempDir out("packed");
    const std::filesystem::path dir = out / "fp8";
    quant::pack_llama(saved.dir.path(), dir,
                      {.weights = k.weights, .static_activations = k.static_activations, .fp8_kv_cache = true}, &stats);
    EXPECT_TRUE(is_packed(dir));
    for (DType kv : {DType::Bf16, DType::E4M3}) {
      LlamaEngine fp8 = LlamaEngine::open(dir, Device::Cpu, {.max_batch = 2, .max_seq = 16, .kv_cache = kv});
      EXPECT_TRUE(fp8.fp8_weights());
      const std::vector<float> got = float_values(fp8.prefill(tokens, 2, 16, 0, true));
      EXPECT_LT(max_abs_diff(got, want), 0.1 * spread) << name(k.weights) << " " << k.static_activations;
      EXPECT_GT(max_abs_diff(got, want), 0.0);
    }
  }
}

TEST(LlamaEngine, RefusesWhatItCannotServe) {
  SavedModel saved(tiny_config());
  LlamaEngine engine = LlamaEngine::from_hf(saved.dir.path(), Device::Cpu, {.max_batch = 2, .max_seq = 8});
  EXPECT_EQ(error_of([&] { engine.prefill(std::vector<int32_t>{1, 61}, 1, 2); }),
            "token 61 at 1 is outside the vocabulary [0, 61)");
  EXPECT_EQ(error_of([&] { engine.prefill(random_tokens(9, 61, 1), 1, 9); }),
            "prefill: 9 tokens per sequence exceed the KV cache's 8 (raise max_seq)");
  EXPECT_EQ(error_of([&] { engine.prefill(random_tokens(6, 61, 1), 3, 2); }),
            "prefill: slots [0, 3) outside the engine's 2 (raise max_batch)");
  using Prompts = std::vector<std::vector<int32_t>>;
  EXPECT_EQ(error_of([&] { engine.prefill(Prompts{}); }), "prefill: no prompts");
  EXPECT_EQ(error_of([&] { engine.prefill(Prompts{{1, 2}, {}}); }), "prefill: prompt 1 is empty");
  EXPECT_EQ(error_of([&] { engine.prefill(Prompts{{1}, {2}, {3}}); }),
            "prefill: slots [0, 3) outside the engine's 2 (raise max_batch)");
  EXPECT_EQ(error_of([&] { engine.prefill(Prompts{{1}}, 2); }),
            "prefill: slots [2, 3) outside the engine's 2 (raise max_batch)");
  EXPECT_EQ(error_of([&] { engine.prefill(Prompts{random_tokens(9, 61, 1), {1}}); }),
            "prefill: prompt 0 has 9 tokens, more than the KV cache's 8 per sequence (raise max_seq)");
  EXPECT_EQ(error_of([&] { engine.prefill(Prompts{{1}, {2, 61}}); }),
            "prefill: prompt 1: token 61 at 1 is outside the vocabulary [0, 61)");
  EXPECT_EQ(error_of([&] { engine.decode(std::vector<int32_t>{1}); }),
            "decode: slot 0 is empty (prefill its prompt first)");
  engine.prefill(random_tokens(8, 61, 1), 1, 8);
  EXPECT_EQ(error_of([&] { engine.decode(std::vector<int32_t>{1}); }),
            "decode: slot 0 is full (8 tokens; raise max_seq)");
  EXPECT_EQ(error_of([&] { (void)LlamaEngine::from_hf(saved.dir.path(), Device::Cpu, {.max_seq = 65}); }),
            "engine: max_seq 65 must be in [1, max_position_embeddings = 64]");
}

}  // namespace
}  // namespace fp8kit::infer
