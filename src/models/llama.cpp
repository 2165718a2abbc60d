// The Llama model: layer wiring, initialisation, forward and backward of a training step.
//
// Mixed bf16 (and the non-FP8 parts of the FP8 model) round every layer's output to bf16 (embedding
// rows, norm outputs, projections, rotated queries and keys, attention outputs, the SwiGLU gate,
// residual sums, logits), with float32 statistics, softmaxes and loss, as a bf16 HF model computes.
// Gradients are float32 except where they feed a matmul.
#include "models/llama.h"

#include "base/error.h"
#include "nn/embedding.h"
#include "nn/grouped_query_attention.h"
#include "nn/init.h"
#include "nn/linear.h"
#include "nn/rms_norm.h"
#include "nn/swiglu_mlp.h"
#include "ops/cross_entropy.h"
#include "ops/elementwise.h"
#include "ops/rope.h"
#include "ops/tensor_checks.h"

#include <deque>
#include <optional>
#include <random>

namespace fp8kit::models {

using nn::Linear;
using nn::Precision;

namespace {

std::string layer_name(int64_t i) { return "model.layers." + std::to_string(i); }

}  // namespace

struct Block {
  nn::RmsNorm input_norm;
  nn::GroupedQueryAttention attention;
  nn::RmsNorm post_attention_norm;
  nn::SwiGluMlp mlp;
  Tensor mid, out;  // the residual stream after the attention and after the MLP, [rows, hidden]
  Tensor d_mid;     // its gradient

  Block(nn::ParameterSet& p, const LlamaConfig& c, int64_t i)
      : input_norm(p, layer_name(i) + ".input_layernorm", c.hidden_size, static_cast<float>(c.rms_norm_eps)),
        attention(p, layer_name(i) + ".self_attn", c.hidden_size, c.num_attention_heads, c.num_key_value_heads,
                  c.head_dim),
        post_attention_norm(p, layer_name(i) + ".post_attention_layernorm", c.hidden_size,
                            static_cast<float>(c.rms_norm_eps)),
        mlp(p, layer_name(i) + ".mlp", c.hidden_size, c.intermediate_size) {}

  // What lives only during this block's backward: every block borrows the same buffers in turn.
  std::vector<Tensor*> backward_buffers() {
    std::vector<Tensor*> all = attention.backward_buffers();
    for (Tensor* t : mlp.backward_buffers()) all.push_back(t);
    all.push_back(&input_norm.dx_buffer());
    all.push_back(&post_attention_norm.dx_buffer());
    all.push_back(&d_mid);
    return all;
  }
};

// Lends one set of backward buffers to each block in turn (swapping Tensors on the host: the same
// storage every step, so a captured step replays unchanged). Sharing them is safe on the GPU because
// nothing reads a block's gradient buffers after its backward except on Main, in order (the weight
// gradients on the other lanes read their own operand copies).
class SharedBackwardBuffers {
 public:
  SharedBackwardBuffers(std::vector<Tensor>& pool, Block& b) : pool_(pool), buffers_(b.backward_buffers()) {
    pool_.resize(buffers_.size());
    for (size_t i = 0; i < buffers_.size(); ++i) std::swap(*buffers_[i], pool_[i]);
  }
  ~SharedBackwardBuffers() {
    for (size_t i = 0; i < buffers_.size(); ++i) std::swap(*buffers_[i], pool_[i]);
  }
  SharedBackwardBuffers(const SharedBackwardBuffers&) = delete;
  SharedBackwardBuffers& operator=(const SharedBackwardBuffers&) = delete;

 private:
  std::vector<Tensor>& pool_;
  std::vector<Tensor*> buffers_;
};

struct Llama::Impl {
  LlamaConfig config;
  Precision precision = Precision::Fp32;
  ops::Context context;
  nn::ParameterSet parameters;
  std::optional<ops::ScalingTable> scaling;  // Fp8 only

  nn::Embedding embedding;
  std::deque<Block> blocks;
  nn::RmsNorm norm;
  std::optional<Linear> lm_head;  // built after the embedding (it may tie to its weight)

  Tensor rope;  // [max_position_embeddings, head_dim / 2, 2]
  int64_t batch = 0, seq = 0;
  bool trained_forward = false;
  Tensor embedded, d_x;  // [rows, hidden]
  std::vector<Tensor> backward_pool;  // the blocks' shared backward buffers
  // Each part's parameters as [begin, end) of the registration order (the embedding's and the final
  // norm's come first: built in the member initializers); the LM head's is empty when tied.
  using Range = std::pair<size_t, size_t>;
  Range embedding_params{0, 1}, norm_params{1, 2}, head_params;
  std::vector<Range> block_params;

  Impl(const LlamaConfig& c, uint64_t seed, Device device)
      : config(c),
        context(device, seed),
        embedding(parameters, "model.embed_tokens", c.vocab_size, c.hidden_size),
        norm(parameters, "model.norm", c.hidden_size, static_cast<float>(c.rms_norm_eps)) {
    auto registered = [&] { return parameters.parameters().size(); };
    FP8KIT_CHECK(registered() == norm_params.second, "the Llama's parameters are not registered in the expected order");
    for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
      const size_t begin = registered();
      blocks.emplace_back(parameters, c, i);
      block_params.emplace_back(begin, registered());
    }
    head_params = {registered(), registered()};
    if (c.tie_word_embeddings) {
      lm_head.emplace(embedding.weight, "lm_head", c.hidden_size, c.vocab_size);
    } else {
      lm_head.emplace(parameters, "lm_head", c.hidden_size, c.vocab_size);
      head_params.second = registered();
    }
    parameters.allocate(Device::Cpu);
    std::mt19937_64 rng(seed);
    for (nn::Parameter* p : parameters.parameters())
      if (p->shape.size() == 2) nn::fill_normal(p->value.span<float>(), 0.02f, rng);  // norms stay 1
    if (device != Device::Cpu) parameters.allocate(device);
    ops::rope_table(context, c.max_position_embeddings, c.head_dim, c.rope_theta, rope);
  }

  std::vector<Linear*> projections() {
    std::vector<Linear*> all;
    for (Block& b : blocks) {
      for (Linear* l : b.attention.linears()) all.push_back(l);
      for (Linear* l : b.mlp.linears()) all.push_back(l);
    }
    return all;
  }
  bool bf16() const { return precision != Precision::Fp32; }

  void forward(const Tensor& tokens, bool training) {
    ops::Context& c = context;
    FP8KIT_CHECK(tokens.rank() == 2 && tokens.dtype() == DType::I32, "tokens must be [batch, seq] i32");
    FP8KIT_CHECK(tokens.dim(1) >= 1 && tokens.dim(1) <= config.max_position_embeddings,
                 "sequence length {} is outside [1, max_position_embeddings = {}]", tokens.dim(1),
                 config.max_position_embeddings);
    batch = tokens.dim(0);
    seq = tokens.dim(1);
    const int64_t rows = batch * seq, hidden = config.hidden_size;
    if (scaling && !training) scaling->clear_evaluation_amaxes(c);
    c.fork(ops::Lane::A);  // the weights' casts for this step, beside the embedding
    {
      const ops::Context::OnLane lane(c, ops::Lane::A);
      std::vector<ops::LinearOp*> ops;
      for (Linear* l : projections()) ops.push_back(&l->op());
      ops::linear_prepare_weights(c, ops, training);
      ops::LinearOp* head = &lm_head->op();
      ops::linear_prepare_weights(c, {&head, 1}, training);
    }
    embedded = embedding.forward(c, tokens, bf16()).view(0, {rows, hidden});
    c.join(ops::Lane::A);
    const Tensor* x = &embedded;
    for (Block& b : blocks) {
      const Tensor& h = b.input_norm.forward(c, *x, bf16());
      b.attention.forward(c, h, batch, seq, rope, training, bf16(), {{}, x, &b.mid});
      const Tensor& h2 = b.post_attention_norm.forward(c, b.mid, bf16());
      b.mlp.forward(c, h2, training, bf16(), {{}, &b.mid, &b.out});
      x = &b.out;
    }
    lm_head->forward(c, norm.forward(c, *x, bf16()), training);
    trained_forward = training;
  }

  void backward(const Tensor& targets, float grad_scale, Tensor& losses, const BackwardHooks& hooks) {
    ops::Context& c = context;
    auto final = [&](Range r) {
      if (hooks.gradients_final && r.first < r.second) hooks.gradients_final(c, r.first, r.second);
    };
    FP8KIT_CHECK(trained_forward, "backward() needs a preceding forward(training=true)");
    trained_forward = false;  // one backward per forward: the FP8 state moves once per step
    Tensor& logits = lm_head->op().y;
    ops::cross_entropy(c, logits, targets, grad_scale, losses, &logits);
    const Tensor& d_final = norm.backward(c, lm_head->backward(c, logits));
    final(head_params);
    final(norm_params);
    const Tensor* d_out = &d_final;  // the gradient of the residual stream after the block
    for (size_t i = blocks.size(); i-- > 0;) {
      Block& b = blocks[i];
      const SharedBackwardBuffers lent(backward_pool, b);
      const Tensor& d_h2 = b.mlp.backward(c, *d_out);
      ops::add(c, *d_out, b.post_attention_norm.backward(c, d_h2), false, b.d_mid);
      const Tensor& d_h = b.attention.backward(c, b.d_mid);
      ops::add(c, b.d_mid, b.input_norm.backward(c, d_h), false, d_x);
      d_out = &d_x;
      final(block_params[i]);
    }
    embedding.backward(c, d_x.view(0, {batch, seq, config.hidden_size}));
    if (config.tie_word_embeddings) {  // the LM head's share of the tied weight's gradient
      c.join_all();
      ops::add(c, embedding.weight.grad, lm_head->tied_grad(), false, embedding.weight.grad);
    }
    final(embedding_params);
    c.join_all();
    if (scaling && hooks.before_scaling_update) hooks.before_scaling_update(c, *scaling);
    if (scaling) {
      c.fork(ops::Lane::Side);
      const ops::Context::OnLane side(c, ops::Lane::Side);
      scaling->update(c);
    }
  }
};

Llama::Llama(const LlamaConfig& config, uint64_t seed, Device device) {
  validate_llama_config(config);
  impl_ = std::make_unique<Impl>(config, seed, device);
  set_precision(Precision::Fp32);
}

Llama::~Llama() = default;
Llama::Llama(Llama&&) noexcept = default;
Llama& Llama::operator=(Llama&&) noexcept = default;

void Llama::set_precision(Precision precision, const Fp8Recipe& recipe) {
  Impl& m = *impl_;
  m.precision = precision;
  m.scaling.reset();
  if (precision == Precision::Fp8) m.scaling.emplace(recipe);
  ops::ScalingTable* table = m.scaling ? &*m.scaling : nullptr;
  for (Block& b : m.blocks) {
    b.attention.set_precision(precision, table);
    b.mlp.set_precision(precision, table);
  }
  m.lm_head->set_precision(precision == Precision::Fp8 ? Precision::Bf16 : precision, nullptr);
  if (table != nullptr) table->allocate(m.context.device());
  m.trained_forward = false;
}

Precision Llama::precision() const { return impl_->precision; }
const LlamaConfig& Llama::config() const { return impl_->config; }
Device Llama::device() const { return impl_->context.device(); }
ops::Context& Llama::context() { return impl_->context; }

const Tensor& Llama::forward(const Tensor& tokens, bool training) {
  impl_->forward(tokens, training);
  return impl_->lm_head->op().y;
}

void Llama::loss(const Tensor& targets, Tensor& losses) {
  Impl& m = *impl_;
  ops::cross_entropy(m.context, m.lm_head->op().y, targets, 1.0f, losses, nullptr);
}

void Llama::backward(const Tensor& targets, float grad_scale, Tensor& losses, const BackwardHooks& hooks) {
  impl_->backward(targets, grad_scale, losses, hooks);
}
nn::ParameterSet& Llama::parameter_set() { return impl_->parameters; }
std::vector<nn::Parameter*> Llama::parameters() { return impl_->parameters.parameters(); }

std::vector<nn::StateTensor> Llama::fp8_state() {
  return impl_->scaling ? nn::state_tensors(impl_->scaling->state()) : std::vector<nn::StateTensor>{};
}

ops::ScalingTable* Llama::scaling() { return impl_->scaling ? &*impl_->scaling : nullptr; }
int64_t Llama::parameter_count() const { return impl_->parameters.count(); }

}  // namespace fp8kit::models
