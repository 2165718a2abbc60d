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
#include "nn/embedding.h"
#include "nn/init.h"
#include "nn/layer_norm.h"
#include "nn/linear.h"
#include "ops/binary_crossentropy.h"
#include "ops/elementwise.h"
#include "ops/mean_pool.h"
#include "ops/tensor_checks.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <optional>
#include <random>

namespace fp8kit::models {

using nn::Activation;
using nn::Linear;
using nn::Precision;

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
  ops::Context context;
  nn::ParameterSet parameters;
  std::optional<ops::ScalingTable> scaling;  // Fp8 only

  nn::TokenAndPositionEmbedding embedding;
  nn::CausalSelfAttention attention;
  nn::LayerNorm attention_norm;
  Linear intermediate, output;
  nn::LayerNorm feedforward_norm;
  Linear dense, dense_1;

  // Activations and gradients owned by the model (layer outputs live in the layers).
  int64_t batch = 0;
  bool trained_forward = false;
  bool has_loss = false;  // the last forward computed the loss and its gradient
  Tensor tokens, labels;                  // [B, T] i32, [B] (the host API's copies on the device)
  Tensor x0;                              // [B T, D]: a view of the embedding's output (the Linears keep it)
  Tensor residual1, residual2, pooled;    // [B T, D], [B T, D], [B, D]
  Tensor h2, probs, loss, dz;             // [B, I], [B], [1], [B, 1]
  Tensor d_pooled_x, d_x0;                // [B T, D]
  std::vector<float> host_probs;

  Impl(const SeedClassifierConfig& c, uint64_t s, Device device)
      : config(c),
        seed(s),
        context(device, s),
        embedding(parameters, "token_and_position_embedding", c.vocabulary_size, c.sequence_length, c.hidden_dim),
        attention(parameters, "transformer_decoder/self_attention", c.hidden_dim, c.num_heads,
                  c.hidden_dim / c.num_heads),
        attention_norm(parameters, "transformer_decoder/self_attention_layer_norm", c.hidden_dim),
        intermediate(parameters, "transformer_decoder/feedforward_intermediate_dense", c.hidden_dim,
                     c.intermediate_dim, {c.hidden_dim, c.intermediate_dim}, {c.intermediate_dim}, Activation::Relu),
        output(parameters, "transformer_decoder/feedforward_output_dense", c.intermediate_dim, c.hidden_dim,
               {c.intermediate_dim, c.hidden_dim}, {c.hidden_dim}, Activation::None),
        feedforward_norm(parameters, "transformer_decoder/feedforward_layer_norm", c.hidden_dim),
        dense(parameters, "dense", c.hidden_dim, c.intermediate_dim, {c.hidden_dim, c.intermediate_dim},
              {c.intermediate_dim}, Activation::Relu),
        dense_1(parameters, "dense_1", c.intermediate_dim, 1, {c.intermediate_dim, 1}, {1}, Activation::None) {}

  std::vector<Linear*> linears() {
    return {&attention.query, &attention.key, &attention.value, &attention.output, &intermediate, &output,
            &dense, &dense_1};
  }

  // On the CPU, then on the model's device.
  void initialise() {
    parameters.allocate(Device::Cpu);
    std::mt19937_64 rng(seed);
    nn::fill_uniform(embedding.token.value.span<float>(), -0.05f, 0.05f, rng);
    nn::fill_uniform(embedding.position.value.span<float>(), -0.05f, 0.05f, rng);
    for (Linear* l : linears()) {
      const float limit = nn::glorot_uniform_limit(l->kernel.shape);
      nn::fill_uniform(l->kernel.value.span<float>(), -limit, limit, rng);
    }
    if (context.device() != Device::Cpu) parameters.allocate(context.device());
  }

  ops::DropoutSpec dropout(Site site, bool training) const { return {site, config.dropout, training}; }
  bool bf16() const { return precision != Precision::Fp32; }

  // labels (training only): the loss and its gradient come with the probabilities, in one op.
  void forward(const Tensor& ids, bool training, const Tensor* y = nullptr) {
    ops::Context& c = context;
    const int64_t B = ids.dim(0), T = config.sequence_length, D = config.hidden_dim;
    FP8KIT_CHECK(ids.rank() == 2 && ids.dim(1) == T, "tokens must be [batch, {}]", T);
    batch = B;
    if (scaling && !training) scaling->clear_evaluation_amaxes(c);
    if (training) {  // the embedding gradient's sort of the ids needs only the ids: on the side, from here
      c.fork(ops::Lane::Side);
      const ops::Context::OnLane side(c, ops::Lane::Side);
      embedding.prepare_backward(c, ids);
    }
    // The weights' casts for this step, on lane A beside the embedding.
    c.fork(ops::Lane::A);
    {
      const ops::Context::OnLane lane(c, ops::Lane::A);
      std::vector<ops::LinearOp*> ops;
      for (Linear* l : linears()) ops.push_back(&l->op());
      ops::linear_prepare_weights(c, ops, training);
    }
    const Tensor& x0d = embedding.forward(c, ids, bf16(), dropout(kEmbeddingDropout, training));
    c.join(ops::Lane::A);
    x0 = x0d.view(0, {B * T, D});
    attention.forward(c, x0, B, T, training, bf16(), dropout(kAttentionProbs, training),
                      {dropout(kAttentionDropout, training), &x0, &residual1});
    const Tensor& x1 = attention_norm.forward(c, residual1, bf16());
    // The intermediate's bias and ReLU ride in the output Linear's reading of h.
    const Tensor& h = intermediate.forward(c, x1, training, {.deferred = true});
    output.forward(c, h, training, {dropout(kFeedforwardDropout, training), &x1, &residual2}, &intermediate);
    const Tensor& x2 = feedforward_norm.forward(c, residual2, bf16());
    ops::mean_pool_forward(c, x2.view(0, {B, T, D}), bf16(), dropout(kPoolDropout, training), pooled);
    dense.forward(c, pooled, training, {dropout(kHeadDropout, training), nullptr, &h2});
    // dense_1's bias rides in the sigmoid's launch.
    const Tensor& z = dense_1.forward(c, h2, training, {.deferred = true});
    ops::sigmoid_binary_crossentropy(c, z, y, bf16(), probs, loss, dz, &dense_1.op());
    trained_forward = training;
    has_loss = y != nullptr;
  }

  // labels: null when the forward had them.
  void backward(const Tensor* y) {
    ops::Context& c = context;
    FP8KIT_CHECK(trained_forward, "backward() needs a preceding forward(training=true)");
    trained_forward = false;  // one backward per forward: the FP8 state moves once per step
    const int64_t B = batch, T = config.sequence_length, D = config.hidden_dim;
    FP8KIT_CHECK(y != nullptr || has_loss, "backward() needs the labels");
    if (y != nullptr) ops::sigmoid_binary_crossentropy(c, dense_1.op().y, y, bf16(), probs, loss, dz);
    const Tensor& d_h2 = dense_1.backward(c, dz);
    const Tensor& d_pooled = dense.backward(c, d_h2, dropout(kHeadDropout, true));
    ops::mean_pool_backward(c, d_pooled, T, bf16(), dropout(kPoolDropout, true), d_pooled_x);
    const Tensor d_x2 = d_pooled_x.view(0, {B * T, D});
    const Tensor& d_r2 = feedforward_norm.backward(c, d_x2);
    const Tensor& d_h = output.backward(c, d_r2, dropout(kFeedforwardDropout, true));
    const Tensor& d_x1_ffn = intermediate.backward(c, d_h);
    const Tensor& d_r1 = attention_norm.backward(c, d_r2, &d_x1_ffn);
    attention.backward(c, d_r1, dropout(kAttentionDropout, true));
    const auto [dq, dk, dv] = attention.input_gradients();
    const Tensor* branches[] = {dq, dk, dv};
    ops::sum_dropout_backward(c, d_r1, branches, bf16(), dropout(kEmbeddingDropout, true), d_x0);
    embedding.backward(c, d_x0.view(0, {B, T, D}));
    // The FP8 scaling update once every lane's work (the last casts and the GEMMs that read this
    // step's scales) is in: on the side lane, beside what follows on Main (the optimizer).
    c.join_all();
    if (scaling) {
      c.fork(ops::Lane::Side);
      const ops::Context::OnLane side(c, ops::Lane::Side);
      scaling->update(c);
    }
  }
};

SeedClassifier::SeedClassifier(const SeedClassifierConfig& config, uint64_t seed, Device device) {
  FP8KIT_CHECK(config.vocabulary_size > 0 && config.sequence_length > 0 && config.hidden_dim > 0 &&
                   config.num_heads > 0 && config.intermediate_dim > 0,
               "model sizes must be positive");
  FP8KIT_CHECK(config.hidden_dim % config.num_heads == 0, "hidden_dim {} must be a multiple of num_heads {}",
               config.hidden_dim, config.num_heads);
  FP8KIT_CHECK(config.dropout >= 0.0f && config.dropout < 1.0f, "dropout must be in [0, 1), got {}", config.dropout);
  impl_ = std::make_unique<Impl>(config, seed, device);
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
  // quantize(model, recipe): the 8 Linears take the model's policy and their FP8 state a slot each in
  // one scaling table; everything else only needs to know whether it runs in mixed bf16, which is also
  // the case for the FP8 model.
  m.scaling.reset();
  if (precision == Precision::Fp8) m.scaling.emplace(recipe);
  ops::ScalingTable* table = m.scaling ? &*m.scaling : nullptr;
  m.attention.set_precision(precision, table);
  for (Linear* l : {&m.intermediate, &m.output, &m.dense, &m.dense_1}) l->set_precision(precision, table);
  if (table != nullptr) table->allocate(m.context.device());
  m.trained_forward = false;
}

Precision SeedClassifier::precision() const { return impl_->precision; }
const Fp8Recipe& SeedClassifier::recipe() const { return impl_->recipe; }
const SeedClassifierConfig& SeedClassifier::config() const { return impl_->config; }
Device SeedClassifier::device() const { return impl_->context.device(); }
ops::Context& SeedClassifier::context() { return impl_->context; }

std::span<const float> SeedClassifier::forward(std::span<const int32_t> tokens, int batch, bool training,
                                               uint64_t step) {
  Impl& m = *impl_;
  FP8KIT_CHECK(batch > 0, "batch size must be positive, got {}", batch);
  const int64_t T = m.config.sequence_length;
  FP8KIT_CHECK(static_cast<int64_t>(tokens.size()) == batch * T, "token batch has {} ids, expected {} x {}",
               tokens.size(), batch, T);
  for (size_t i = 0; i < tokens.size(); ++i)
    FP8KIT_CHECK(tokens[i] >= 0 && tokens[i] < m.config.vocabulary_size,
                 "token id {} at position {} is outside the vocabulary [0, {})", tokens[i], i,
                 m.config.vocabulary_size);
  ops::sized(m.tokens, {batch, T}, DType::I32, device());
  m.tokens.copy_from_host(tokens.data());
  if (m.context.step() != step) m.context.set_step(step);
  m.forward(m.tokens, training);
  m.context.synchronize();
  const Tensor probs = m.probs.to(Device::Cpu);
  m.host_probs.assign(probs.data<float>(), probs.data<float>() + probs.numel());
  return m.host_probs;
}

float SeedClassifier::backward(std::span<const float> labels) {
  Impl& m = *impl_;
  FP8KIT_CHECK(m.trained_forward, "backward() needs a preceding forward(training=true)");
  FP8KIT_CHECK(static_cast<int64_t>(labels.size()) == m.batch, "{} labels for a batch of {}", labels.size(), m.batch);
  ops::sized(m.labels, {m.batch}, DType::F32, device());
  m.labels.copy_from_host(labels.data());
  m.backward(&m.labels);
  m.context.synchronize();
  return m.loss.to(Device::Cpu).data<float>()[0];
}

void SeedClassifier::forward(const Tensor& tokens, bool training) { impl_->forward(tokens, training); }
void SeedClassifier::backward(const Tensor& labels) { impl_->backward(&labels); }
void SeedClassifier::forward_backward(const Tensor& tokens, const Tensor& labels) {
  impl_->forward(tokens, true, &labels);
  impl_->backward(nullptr);
}
const Tensor& SeedClassifier::probabilities() const { return impl_->probs; }
const Tensor& SeedClassifier::loss() const { return impl_->loss; }
nn::ParameterSet& SeedClassifier::parameter_set() { return impl_->parameters; }

std::vector<nn::Parameter*> SeedClassifier::parameters() { return impl_->parameters.parameters(); }

std::vector<nn::StateTensor> SeedClassifier::fp8_state() {
  return impl_->scaling ? nn::state_tensors(impl_->scaling->state()) : std::vector<nn::StateTensor>{};
}

ops::ScalingTable* SeedClassifier::scaling() { return impl_->scaling ? &*impl_->scaling : nullptr; }

int64_t SeedClassifier::parameter_count() const { return impl_->parameters.count(); }

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
    for (const nn::Parameter* p : ps) n += nn::numel(p->shape);
    return n;
  };
  int64_t decoder = 0;
  for (const Linear* l : {&m.attention.query, &m.attention.key, &m.attention.value, &m.attention.output,
                          &m.intermediate, &m.output})
    decoder += count({&l->kernel, l->bias});
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
      {"dense", "Dense", "(None, " + inter + ")", count({&m.dense.kernel, m.dense.bias})},
      {"dropout_3", "Dropout", "(None, " + inter + ")", 0},
      {"dense_1", "Dense", "(None, 1)", count({&m.dense_1.kernel, m.dense_1.bias})},
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
  if (m.precision == Precision::Fp8 && m.recipe.mode == ScalingMode::Block) {  // current scales only: no state
    out += fmt::format(" FP8 recipe: {}, in {} quantized layers: {}\n", describe(m.recipe), quantized_layers().size(),
                       fmt::join(quantized_layers(), ", "));
  } else if (m.precision == Precision::Fp8) {
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
