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

#include <algorithm>
#include <deque>
#include <optional>
#include <random>

namespace fp8kit::models {

using nn::Linear;
using nn::Precision;

namespace {

constexpr int64_t kLossChunkBytes = int64_t{64} << 20;  // f32 logits per chunk

std::string layer_name(int64_t i) { return "model.layers." + std::to_string(i); }

}  // namespace

int64_t default_loss_chunk_rows(int64_t vocab_size) {
  FP8KIT_CHECK(vocab_size > 0, "the vocabulary size must be positive, not {}", vocab_size);
  const int64_t rows = kLossChunkBytes / (static_cast<int64_t>(sizeof(float)) * vocab_size);
  return std::max<int64_t>(256, rows / 128 * 128);
}

struct Block {
  nn::RmsNorm input_norm;
  nn::GroupedQueryAttention attention;
  nn::RmsNorm post_attention_norm;
  nn::SwiGluMlp mlp;
  Tensor mid, out;  // the residual stream after the attention and after the MLP, [rows, hidden]
  Tensor d_mid;     // its gradient

  const Tensor* input = nullptr;  // the residual stream before the block (the previous one's out)

  Block(nn::ParameterSet& p, const LlamaConfig& c, int64_t i)
      : input_norm(p, layer_name(i) + ".input_layernorm", c.hidden_size, static_cast<float>(c.rms_norm_eps)),
        attention(p, layer_name(i) + ".self_attn", c.hidden_size, c.num_attention_heads, c.num_key_value_heads,
                  c.head_dim),
        post_attention_norm(p, layer_name(i) + ".post_attention_layernorm", c.hidden_size,
                            static_cast<float>(c.rms_norm_eps)),
        mlp(p, layer_name(i) + ".mlp", c.hidden_size, c.intermediate_size) {}

  // x: the residual stream before the block, unchanged until backward. keep_output false (a
  // recomputation): `out`, which the next block has read already, is not written again.
  void forward(ops::Context& c, const Tensor& x, int64_t batch, int64_t seq, const Tensor& rope, bool training,
               bool bf16, bool keep_output = true) {
    input = &x;
    const Tensor& h = input_norm.forward(c, x, bf16);
    attention.forward(c, h, batch, seq, &rope, training, bf16, {{}, &x, &mid});
    const Tensor& h2 = post_attention_norm.forward(c, mid, bf16);
    mlp.forward(c, h2, training, bf16, keep_output ? ops::LinearOutput{{}, &mid, &out} : ops::LinearOutput{});
  }

  // What lives only during this block's backward: every block borrows the same buffers in turn.
  std::vector<Tensor*> backward_buffers() {
    std::vector<Tensor*> all = attention.backward_buffers();
    for (Tensor* t : mlp.backward_buffers()) all.push_back(t);
    all.push_back(&d_mid);
    return all;
  }

  // The rest of what its forward and backward write but `out`: with recomputation, also borrowed.
  std::vector<Tensor*> step_buffers() {
    std::vector<Tensor*> all = attention.step_buffers();
    for (nn::RmsNorm* n : {&input_norm, &post_attention_norm})
      for (Tensor* t : n->step_buffers()) all.push_back(t);
    for (Tensor* t : mlp.step_buffers()) all.push_back(t);
    all.push_back(&mid);
    return all;
  }
};

// Lends one set of backward buffers to each block in turn (swapping Tensors on the host: the same
// storage every step, so a captured step replays unchanged). Sharing them is safe on the GPU because
// nothing reads a block's gradient buffers after its backward except on Main, in order (the weight
// gradients on the other lanes read their own operand copies).
// With recomputation the same holds for the blocks' step buffers once the lanes that read them (the
// weight gradients) have been joined: Impl::backward joins them before each block.
class SharedBuffers {
 public:
  // Lends nothing when `lend` is false.
  SharedBuffers(std::vector<Tensor>& pool, std::vector<Tensor*> buffers, bool lend = true)
      : pool_(pool), buffers_(lend ? std::move(buffers) : std::vector<Tensor*>{}) {
    pool_.resize(std::max(pool_.size(), buffers_.size()));
    for (size_t i = 0; i < buffers_.size(); ++i) std::swap(*buffers_[i], pool_[i]);
  }
  ~SharedBuffers() {
    for (size_t i = 0; i < buffers_.size(); ++i) std::swap(*buffers_[i], pool_[i]);
  }
  SharedBuffers(const SharedBuffers&) = delete;
  SharedBuffers& operator=(const SharedBuffers&) = delete;

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
  LlamaMemoryOptions memory;
  int64_t batch = 0, seq = 0;
  bool trained_forward = false;
  const Tensor* final_hidden = nullptr;  // the final norm's output in the last forward, [rows, hidden]
  bool head_deferred = false;            // the last forward left the LM head to a chunked pass
  Tensor embedded, d_x;  // [rows, hidden]
  Tensor head_grad_part;  // a chunk's share of the head weight's gradient (chunks after the first)
  std::vector<Tensor> backward_pool;  // the blocks' shared backward buffers
  std::vector<Tensor> step_pool;      // with recomputation, the blocks' shared step buffers
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

  // Up to the final norm; then the LM head, unless `head` is false or a training forward's rows
  // exceed a loss chunk (the head then runs in backward()).
  void forward(const Tensor& tokens, bool training, bool head = true) {
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
      const SharedBuffers lent(step_pool, b.step_buffers(), memory.recompute);
      b.forward(c, *x, batch, seq, rope, training, bf16());
      x = &b.out;
    }
    const Tensor& h = norm.forward(c, *x, bf16());
    final_hidden = &h;
    head_deferred = !head || (training && head_chunk_rows(rows) < rows);
    if (!head_deferred) lm_head->forward(c, h, training);
    trained_forward = training;
  }

  int64_t head_chunk_rows(int64_t rows) const {
    const int64_t limit =
        memory.loss_chunk_rows > 0 ? memory.loss_chunk_rows : default_loss_chunk_rows(config.vocab_size);
    const int64_t chunks = (rows + limit - 1) / limit;
    return (rows + chunks - 1) / chunks;  // chunks as even as they go
  }

  // After a forward that left the LM head out: the head and the cross-entropy, chunk by chunk of rows
  // of final_hidden, losses [rows]; training: also their backward, each chunk's logits turned into
  // their gradient in place and multiplied back into the chunk's rows of the hidden states' gradient
  // (returned) and a share of the head weight's gradient. Every chunk reuses the head's buffers, so
  // the next one waits for the previous one's weight gradient (on the side lane).
  const Tensor& chunked_head(const Tensor& targets, float grad_scale, Tensor& losses, bool training) {
    ops::Context& c = context;
    const int64_t rows = batch * seq, hidden = config.hidden_size, step = head_chunk_rows(rows);
    ops::check_tensor(c, targets, {rows}, DType::I32, "llama", "targets (one per token)");
    ops::prepare_output(c, losses, {rows}, DType::F32, "llama", "losses");
    ops::LinearOp& head = lm_head->op();
    Tensor* const grad = head.dw;
    if (training) {
      ops::sized(head_grad_part, {head.out, head.in}, DType::F32, c.device());
      ops::sized(d_x, {rows, hidden}, DType::F32, c.device());  // free until the blocks' backward
    }
    for (int64_t r = 0; r < rows; r += step) {
      const int64_t n = std::min(step, rows - r);
      if (r > 0) c.join(ops::Lane::Side);
      const Tensor x = final_hidden->view(r * hidden, {n, hidden});
      ops::linear_forward(c, head, x, training);
      Tensor chunk_losses = losses.view(r, {n});
      ops::cross_entropy(c, head.y, targets.view(r, {n}), grad_scale, chunk_losses, training ? &head.y : nullptr);
      if (!training) continue;
      head.dw = r == 0 ? grad : &head_grad_part;
      const ops::LinearGradient g{&head, &head.y};
      ops::linear_backward(c, {&g, 1});
      Tensor dx = d_x.view(r * hidden, {n, hidden});
      ops::copy(c, head.dx, dx);
      if (r > 0) {  // after this chunk's weight gradient, on its lane
        const ops::Context::OnLane side(c, ops::Lane::Side);
        ops::add(c, *grad, head_grad_part, false, *grad);
      }
    }
    head.dw = grad;
    return d_x;
  }

  void backward(const Tensor& targets, float grad_scale, Tensor& losses, const BackwardHooks& hooks) {
    ops::Context& c = context;
    auto final = [&](Range r) {
      if (hooks.gradients_final && r.first < r.second) hooks.gradients_final(c, r.first, r.second);
    };
    FP8KIT_CHECK(trained_forward, "backward() needs a preceding forward(training=true)");
    trained_forward = false;  // one backward per forward: the FP8 state moves once per step
    const Tensor* d_head = nullptr;
    if (head_deferred) {
      d_head = &chunked_head(targets, grad_scale, losses, true);
    } else {
      Tensor& logits = lm_head->op().y;
      ops::cross_entropy(c, logits, targets, grad_scale, losses, &logits);
      d_head = &lm_head->backward(c, logits);
    }
    const Tensor& d_final = norm.backward(c, *d_head);
    final(head_params);
    final(norm_params);
    const Tensor* d_out = &d_final;  // the gradient of the residual stream after the block
    for (size_t i = blocks.size(); i-- > 0;) {
      Block& b = blocks[i];
      if (memory.recompute) {  // the step buffers' readers on the other lanes (the block after) are done
        for (const ops::Lane lane : {ops::Lane::Side, ops::Lane::A, ops::Lane::B}) c.join(lane);
      }
      const SharedBuffers lent(backward_pool, b.backward_buffers());
      const SharedBuffers lent_steps(step_pool, b.step_buffers(), memory.recompute);
      if (memory.recompute) {
        if (scaling) scaling->set_replaying(true);
        b.forward(c, *b.input, batch, seq, rope, true, bf16(), /*keep_output=*/false);
        if (scaling) scaling->set_replaying(false);
      }
      const Tensor& d_h2 = b.mlp.backward(c, *d_out);
      b.post_attention_norm.backward(c, d_h2, *d_out, b.d_mid);  // + the residual stream's gradient
      const Tensor& d_h = b.attention.backward(c, b.d_mid);
      b.input_norm.backward(c, d_h, b.d_mid, d_x);
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

void Llama::set_precision(Precision precision, const Fp8Recipe& recipe, const nn::LinearRecipes& linears) {
  Impl& m = *impl_;
  const std::vector<Linear*> all = this->linears();
  std::vector<std::string> paths;
  for (const Linear* l : all) paths.push_back(l->path());
  linears.check_matched(paths);
  // Each Linear's choice: the model's policy (FP8 projections, a bf16 LM head), then the last rule.
  std::vector<nn::LinearChoice> choices;
  for (const Linear* l : all) {
    const bool head = l == &*m.lm_head;
    nn::LinearChoice c{precision == Precision::Fp8 && head ? Precision::Bf16 : precision, recipe.mode};
    if (const auto r = linears.find(l->path())) c = nn::choose(*r, recipe);
    choices.push_back(c);
  }
  m.precision = precision;
  m.scaling.reset();
  if (std::any_of(choices.begin(), choices.end(), [](const nn::LinearChoice& c) { return c.precision == Precision::Fp8; }))
    m.scaling.emplace(recipe);
  ops::ScalingTable* table = m.scaling ? &*m.scaling : nullptr;
  for (size_t i = 0; i < all.size(); ++i) all[i]->set_precision(choices[i].precision, table, choices[i].mode);
  for (Block& b : m.blocks) {
    b.attention.share_inputs();
    b.mlp.share_inputs();
  }
  if (table != nullptr) table->allocate(m.context.device());
  m.trained_forward = false;
}

Precision Llama::precision() const { return impl_->precision; }

void Llama::set_fp8_attention(bool fp8) {
  for (Block& b : impl_->blocks) b.attention.set_fp8_attention(fp8);
}

bool Llama::fp8_attention() const { return !impl_->blocks.empty() && impl_->blocks.front().attention.fp8_attention(); }

void Llama::set_memory_options(const LlamaMemoryOptions& options) {
  FP8KIT_CHECK(options.loss_chunk_rows >= 0, "the loss chunk must be 0 (automatic) or a number of rows, not {}",
               options.loss_chunk_rows);
  impl_->memory = options;
  impl_->trained_forward = false;  // a forward made under the old options does not fit the new backward
}

const LlamaMemoryOptions& Llama::memory_options() const { return impl_->memory; }
const LlamaConfig& Llama::config() const { return impl_->config; }
Device Llama::device() const { return impl_->context.device(); }
ops::Context& Llama::context() { return impl_->context; }

const Tensor& Llama::forward(const Tensor& tokens, bool training) {
  impl_->forward(tokens, training);
  static const Tensor kNoLogits;
  return impl_->head_deferred ? kNoLogits : impl_->lm_head->op().y;
}

void Llama::loss(const Tensor& targets, Tensor& losses) {
  Impl& m = *impl_;
  FP8KIT_CHECK(!m.head_deferred,
               "Llama::loss needs forward()'s logits, which a training forward in loss chunks and evaluate() "
               "do not make: call backward() after a training forward, or forward(tokens, false) before loss()");
  ops::cross_entropy(m.context, m.lm_head->op().y, targets, 1.0f, losses, nullptr);
}

void Llama::evaluate(const Tensor& tokens, const Tensor& targets, Tensor& losses) {
  impl_->forward(tokens, false, /*head=*/false);
  impl_->chunked_head(targets, 1.0f, losses, false);
}

void Llama::backward(const Tensor& targets, float grad_scale, Tensor& losses, const BackwardHooks& hooks) {
  impl_->backward(targets, grad_scale, losses, hooks);
}
nn::ParameterSet& Llama::parameter_set() { return impl_->parameters; }
std::vector<nn::Parameter*> Llama::parameters() { return impl_->parameters.parameters(); }

std::vector<Linear*> Llama::linears() {
  std::vector<Linear*> all = impl_->projections();
  all.push_back(&*impl_->lm_head);
  return all;
}

std::vector<nn::StateTensor> Llama::fp8_state() {
  return impl_->scaling ? nn::state_tensors(impl_->scaling->state()) : std::vector<nn::StateTensor>{};
}

ops::ScalingTable* Llama::scaling() { return impl_->scaling ? &*impl_->scaling : nullptr; }
int64_t Llama::parameter_count() const { return impl_->parameters.count(); }

}  // namespace fp8kit::models
