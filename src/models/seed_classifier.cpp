// The seed classifier: layer wiring, initialisation, forward/backward of a training step, summary.
//
// Mixed bf16 (and the non-FP8 parts of the FP8 model) mirror Keras's mixed_bfloat16 policy: every
// layer's output is a bf16 value (embedding sum, dropout, residual sums, LayerNorm output after
// float32 statistics, attention scores/probabilities/context, Dense outputs, the pooled mean, the
// sigmoid), matmul operands are bf16 with float32 accumulation, and the loss is float32. Gradients
// are float32 except where they feed a matmul (rounded to bf16 there, FP8 in the FP8 Linears);
// the float32 master weights receive float32 gradients.
#include "models/seed_classifier.h"

#include "base/error.h"
#include "nn/attention.h"
#include "nn/binary_crossentropy.h"
#include "nn/dropout.h"
#include "nn/embedding.h"
#include "nn/init.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "nn/mean_pool.h"
#include "ops/cpu/elementwise.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <random>

namespace fp8kit::models {

using nn::Activation;
using nn::Linear;
using nn::Precision;
using ops::cpu::add;  // a residual connection (out = a + b, rounded to bf16 when bf16)

namespace {

// Dropout sites (each draws an independent mask per step).
enum Site : uint32_t { kEmbeddingDropout, kAttentionProbs, kAttentionDropout, kFeedforwardDropout, kPoolDropout,
                       kHeadDropout };

std::string with_commas(int64_t n) {
  std::string digits = std::to_string(n), out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string human_bytes(int64_t bytes) {
  if (bytes < 1024) return fmt::format("{:.2f} B", static_cast<double>(bytes));
  if (bytes < 1024 * 1024) return fmt::format("{:.2f} KB", bytes / 1024.0);
  return fmt::format("{:.2f} MB", bytes / (1024.0 * 1024.0));
}

}  // namespace

struct SeedClassifier::Impl {
  SeedClassifierConfig config;
  uint64_t seed;
  Precision precision = Precision::Fp32;
  Fp8Recipe recipe;

  nn::TokenAndPositionEmbedding embedding;
  nn::Dropout embedding_dropout;
  nn::CausalSelfAttention attention;
  nn::Dropout attention_dropout;
  nn::LayerNorm attention_norm;
  Linear intermediate, output;
  nn::Dropout feedforward_dropout;
  nn::LayerNorm feedforward_norm;
  nn::Dropout pool_dropout;
  Linear dense;
  nn::Dropout head_dropout;
  Linear dense_1;

  // Activations owned by the model (layer outputs live in the layers).
  int64_t batch = 0;
  bool trained_forward = false;
  Tensor residual1, residual2, pooled, probs;  // [B,T,D], [B,T,D], [B,D], [B]
  Tensor d_pooled_x, d_x1, d_x0, dz;          // [B,T,D], [B,T,D], [B,T,D], [B]

  Impl(const SeedClassifierConfig& c, uint64_t s)
      : config(c),
        seed(s),
        embedding("token_and_position_embedding", c.vocabulary_size, c.sequence_length, c.hidden_dim),
        embedding_dropout(kEmbeddingDropout, c.dropout),
        attention("transformer_decoder/self_attention", c.hidden_dim, c.num_heads, c.hidden_dim / c.num_heads,
                  c.dropout, kAttentionProbs),
        attention_dropout(kAttentionDropout, c.dropout),
        attention_norm("transformer_decoder/self_attention_layer_norm", c.hidden_dim),
        intermediate("transformer_decoder/feedforward_intermediate_dense", c.hidden_dim, c.intermediate_dim,
                     {c.hidden_dim, c.intermediate_dim}, {c.intermediate_dim}, Activation::Relu),
        output("transformer_decoder/feedforward_output_dense", c.intermediate_dim, c.hidden_dim,
               {c.intermediate_dim, c.hidden_dim}, {c.hidden_dim}, Activation::None),
        feedforward_dropout(kFeedforwardDropout, c.dropout),
        feedforward_norm("transformer_decoder/feedforward_layer_norm", c.hidden_dim),
        pool_dropout(kPoolDropout, c.dropout),
        dense("dense", c.hidden_dim, c.intermediate_dim, {c.hidden_dim, c.intermediate_dim}, {c.intermediate_dim},
              Activation::Relu),
        head_dropout(kHeadDropout, c.dropout),
        dense_1("dense_1", c.intermediate_dim, 1, {c.intermediate_dim, 1}, {1}, Activation::None) {}

  std::vector<Linear*> linears() {
    return {&attention.query, &attention.key, &attention.value, &attention.output, &intermediate, &output,
            &dense, &dense_1};
  }

  std::vector<nn::Parameter*> parameters() {
    std::vector<nn::Parameter*> p = {&embedding.token, &embedding.position};
    for (Linear* l : {&attention.query, &attention.key, &attention.value, &attention.output}) {
      p.push_back(&l->kernel);
      p.push_back(&l->bias);
    }
    p.insert(p.end(), {&attention_norm.gamma, &attention_norm.beta, &intermediate.kernel, &intermediate.bias,
                       &output.kernel, &output.bias, &feedforward_norm.gamma, &feedforward_norm.beta, &dense.kernel,
                       &dense.bias, &dense_1.kernel, &dense_1.bias});
    return p;
  }

  void initialise() {
    std::mt19937_64 rng(seed);
    nn::fill_uniform(embedding.token.value, -0.05f, 0.05f, rng);
    nn::fill_uniform(embedding.position.value, -0.05f, 0.05f, rng);
    for (Linear* l : linears()) {
      const float limit = nn::glorot_uniform_limit(l->kernel.shape);
      nn::fill_uniform(l->kernel.value, -limit, limit, rng);
    }
  }
};

SeedClassifier::SeedClassifier(const SeedClassifierConfig& config, uint64_t seed) {
  FP8KIT_CHECK(config.vocabulary_size > 0 && config.sequence_length > 0 && config.hidden_dim > 0 &&
                   config.num_heads > 0 && config.intermediate_dim > 0,
               "model sizes must be positive");
  FP8KIT_CHECK(config.hidden_dim % config.num_heads == 0, "hidden_dim {} must be a multiple of num_heads {}",
               config.hidden_dim, config.num_heads);
  FP8KIT_CHECK(config.dropout >= 0.0f && config.dropout < 1.0f, "dropout must be in [0, 1), got {}", config.dropout);
  impl_ = std::make_unique<Impl>(config, seed);
  impl_->initialise();
  set_precision(Precision::Fp32);
}

SeedClassifier::~SeedClassifier() = default;
SeedClassifier::SeedClassifier(SeedClassifier&&) noexcept = default;
SeedClassifier& SeedClassifier::operator=(SeedClassifier&&) noexcept = default;

void SeedClassifier::set_precision(Precision precision, const Fp8Recipe& recipe) {
  Impl& m = *impl_;
  m.precision = precision;
  m.recipe = recipe;
  // quantize(model, recipe): the 8 Linears take the model's policy; everything else only needs to
  // know whether it runs in mixed bf16, which is also the case for the FP8 model.
  for (Linear* l : m.linears()) l->set_precision(precision, recipe);
  m.attention.set_precision(precision, recipe);
  m.trained_forward = false;
}

Precision SeedClassifier::precision() const { return impl_->precision; }
const Fp8Recipe& SeedClassifier::recipe() const { return impl_->recipe; }
const SeedClassifierConfig& SeedClassifier::config() const { return impl_->config; }

std::span<const float> SeedClassifier::forward(std::span<const int32_t> tokens, int batch, bool training,
                                               uint64_t step) {
  Impl& m = *impl_;
  FP8KIT_CHECK(batch > 0, "batch size must be positive, got {}", batch);
  const int64_t B = batch, T = m.config.sequence_length, D = m.config.hidden_dim;
  const bool bf16 = m.precision != Precision::Fp32;
  const uint64_t seed = m.seed;
  m.batch = B;

  auto x0 = m.embedding.forward(tokens, B, bf16);
  auto x0d = m.embedding_dropout.forward(x0, training, seed, step, bf16);
  auto attn = m.attention.forward(x0d, B, T, training, seed, step);
  auto attn_d = m.attention_dropout.forward(attn, training, seed, step, bf16);
  m.residual1.resize({B, T, D});
  add(x0d, attn_d, bf16, m.residual1.span<float>());
  auto x1 = m.attention_norm.forward(m.residual1.span<float>(), B * T, bf16);
  auto h = m.intermediate.forward(x1, B * T, training);
  auto f = m.output.forward(h, B * T, training);
  auto f_d = m.feedforward_dropout.forward(f, training, seed, step, bf16);
  m.residual2.resize({B, T, D});
  add(x1, f_d, bf16, m.residual2.span<float>());
  auto x2 = m.feedforward_norm.forward(m.residual2.span<float>(), B * T, bf16);
  m.pooled.resize({B, D});
  nn::mean_pool_forward(x2, B, T, D, bf16, m.pooled.span<float>());
  auto pooled_d = m.pool_dropout.forward(m.pooled.span<float>(), training, seed, step, bf16);
  auto h2 = m.dense.forward(pooled_d, B, training);
  auto h2_d = m.head_dropout.forward(h2, training, seed, step, bf16);
  auto z = m.dense_1.forward(h2_d, B, training);
  m.probs.resize({B});
  nn::sigmoid(z, bf16, m.probs.span<float>());
  m.trained_forward = training;
  return m.probs.span<float>();
}

float SeedClassifier::backward(std::span<const float> labels) {
  Impl& m = *impl_;
  FP8KIT_CHECK(m.trained_forward, "backward() needs a preceding forward(training=true)");
  const int64_t B = m.batch, T = m.config.sequence_length, D = m.config.hidden_dim;
  FP8KIT_CHECK(static_cast<int64_t>(labels.size()) == B, "{} labels for a batch of {}", labels.size(), B);
  m.trained_forward = false;  // one backward per forward: the FP8 gradient state moves once per step

  const float loss = nn::binary_crossentropy(m.probs.span<float>(), labels);
  m.dz.resize({B});
  nn::binary_crossentropy_sigmoid_backward(m.probs.span<float>(), labels, m.dz.span<float>());
  auto d_h2d = m.dense_1.backward(m.dz.span<float>());
  auto d_h2 = m.head_dropout.backward(d_h2d);
  auto d_pooled_d = m.dense.backward(d_h2);
  auto d_pooled = m.pool_dropout.backward(d_pooled_d);
  m.d_pooled_x.resize({B, T, D});
  nn::mean_pool_backward(d_pooled, B, T, D, m.d_pooled_x.span<float>());
  auto d_r2 = m.feedforward_norm.backward(m.d_pooled_x.span<float>());
  auto d_f = m.feedforward_dropout.backward(d_r2);
  auto d_h = m.output.backward(d_f);
  auto d_x1_ffn = m.intermediate.backward(d_h);
  m.d_x1.resize({B, T, D});
  add(d_r2, d_x1_ffn, false, m.d_x1.span<float>());
  auto d_r1 = m.attention_norm.backward(m.d_x1.span<float>());
  auto d_attn = m.attention_dropout.backward(d_r1);
  auto d_x0d_attn = m.attention.backward(d_attn);
  m.d_x0.resize({B, T, D});
  add(d_r1, d_x0d_attn, false, m.d_x0.span<float>());
  auto d_x0 = m.embedding_dropout.backward(m.d_x0.span<float>());
  m.embedding.backward(d_x0);
  return loss;
}

std::vector<nn::Parameter*> SeedClassifier::parameters() { return impl_->parameters(); }

std::vector<nn::StateEntry> SeedClassifier::fp8_state() {
  std::vector<nn::StateEntry> entries;
  for (Linear* l : impl_->linears()) {
    auto e = l->fp8_state();
    entries.insert(entries.end(), std::make_move_iterator(e.begin()), std::make_move_iterator(e.end()));
  }
  return entries;
}

int64_t SeedClassifier::parameter_count() const {
  int64_t n = 0;
  for (const nn::Parameter* p : impl_->parameters()) n += p->numel();
  return n;
}

std::vector<std::string> SeedClassifier::quantized_layers() const {
  std::vector<std::string> names;
  if (impl_->precision != Precision::Fp8) return names;
  for (const Linear* l : impl_->linears()) names.push_back(l->name());
  return names;
}

std::string SeedClassifier::summary() const {
  Impl& m = *impl_;
  const auto& c = m.config;
  auto count = [](std::initializer_list<const nn::Parameter*> ps) {
    int64_t n = 0;
    for (const nn::Parameter* p : ps) n += p->numel();
    return n;
  };
  int64_t decoder = 0;
  for (const Linear* l : {&m.attention.query, &m.attention.key, &m.attention.value, &m.attention.output,
                          &m.intermediate, &m.output})
    decoder += count({&l->kernel, &l->bias});
  decoder += count({&m.attention_norm.gamma, &m.attention_norm.beta, &m.feedforward_norm.gamma,
                    &m.feedforward_norm.beta});
  const std::string seq = std::to_string(c.sequence_length), hid = std::to_string(c.hidden_dim),
                    inter = std::to_string(c.intermediate_dim);
  struct Row {
    std::string layer, type, shape;
    int64_t params;
  };
  const std::vector<Row> rows = {
      {"input_ids", "InputLayer", "(None, " + seq + ")", 0},
      {"token_and_position_embedding", "TokenAndPositionEmbedding", "(None, " + seq + ", " + hid + ")",
       count({&m.embedding.token, &m.embedding.position})},
      {"dropout", "Dropout", "(None, " + seq + ", " + hid + ")", 0},
      {"transformer_decoder", "TransformerDecoder", "(None, " + seq + ", " + hid + ")", decoder},
      {"global_average_pooling1d", "GlobalAveragePooling1D", "(None, " + hid + ")", 0},
      {"dropout_2", "Dropout", "(None, " + hid + ")", 0},
      {"dense", "Dense", "(None, " + inter + ")", count({&m.dense.kernel, &m.dense.bias})},
      {"dropout_3", "Dropout", "(None, " + inter + ")", 0},
      {"dense_1", "Dense", "(None, 1)", count({&m.dense_1.kernel, &m.dense_1.bias})},
  };
  constexpr int w1 = 33, w2 = 24, w3 = 15;
  auto line = [&](const char* l, const char* mid, const char* r) {
    std::string s = l;
    for (int i = 0; i < w1; ++i) s += "─";
    s += mid;
    for (int i = 0; i < w2; ++i) s += "─";
    s += mid;
    for (int i = 0; i < w3; ++i) s += "─";
    return s + r + "\n";
  };
  std::string out = fmt::format("Model: \"seed_classifier\" (precision {})\n", nn::name(m.precision));
  out += line("┌", "┬", "┐");
  out += fmt::format("│ {:<{}}│ {:<{}}│ {:>{}} │\n", "Layer (type)", w1 - 1, "Output Shape", w2 - 1, "Param #", w3 - 2);
  out += line("├", "┼", "┤");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Row& r = rows[i];
    const std::string first = r.layer + " (" + r.type + ")";
    if (static_cast<int>(first.size()) <= w1 - 1) {
      out += fmt::format("│ {:<{}}│ {:<{}}│ {:>{}} │\n", first, w1 - 1, r.shape, w2 - 1, with_commas(r.params), w3 - 2);
    } else {  // Keras wraps long names: the type goes on a second line
      out += fmt::format("│ {:<{}}│ {:<{}}│ {:>{}} │\n", r.layer, w1 - 1, r.shape, w2 - 1, with_commas(r.params), w3 - 2);
      out += fmt::format("│ {:<{}}│ {:<{}}│ {:>{}} │\n", "(" + r.type + ")", w1 - 1, "", w2 - 1, "", w3 - 2);
    }
    out += i + 1 < rows.size() ? line("├", "┼", "┤") : line("└", "┴", "┘");
  }
  const int64_t total = parameter_count();
  out += fmt::format(" Total params: {} ({})\n", with_commas(total), human_bytes(total * 4));
  out += fmt::format(" Trainable params: {} ({})\n", with_commas(total), human_bytes(total * 4));
  out += fmt::format(" Non-trainable params: 0 ({})\n", human_bytes(0));
  if (m.precision == Precision::Fp8) {
    // Per FP8 Linear: three scales and three amax histories.
    const int64_t fp8 = static_cast<int64_t>(m.linears().size() * 3 * (1 + m.recipe.amax_history_length));
    out += fmt::format(" FP8 scaling state: {} values ({}) in {} quantized layers: {}\n", with_commas(fp8),
                       human_bytes(fp8 * 4), quantized_layers().size(), fmt::join(quantized_layers(), ", "));
    const Fp8Recipe& r = m.recipe;
    out += fmt::format(" FP8 recipe: {} scaling{}, amax history {} ({}), margin {}, {} forward, {} backward\n",
                       r.mode == ScalingMode::Delayed ? "delayed" : "current",
                       r.mode == ScalingMode::Delayed ? (r.lag == ScalingLag::Te ? " (te lag)" : " (keras lag)") : "",
                       r.amax_history_length, r.amax_algorithm == AmaxAlgorithm::Max ? "max" : "most_recent",
                       r.scale_options.margin, name(r.forward_format), name(r.backward_format));
  }
  return out;
}

}  // namespace fp8kit::models
