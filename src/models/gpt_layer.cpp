// The GPT layer: wiring, initialisation, forward and backward.
//
// Mixed bf16 (and the non-FP8 parts of the FP8 layer) round every step's output to bf16 (norm
// outputs, projections after their bias, attention outputs, GELU, residual sums), with float32
// statistics and softmax, as Transformer Engine's bf16 layer computes. Gradients are float32 except
// where they feed a matmul.
#include "models/gpt_layer.h"

#include "base/error.h"
#include "nn/init.h"

#include <random>

namespace fp8kit::models {

using nn::Precision;

double gpt_layer_flops(const GptLayerConfig& c, int64_t batch, int64_t seq) {
  const double rows = static_cast<double>(batch * seq), h = static_cast<double>(c.hidden);
  const double projections = 3.0 * 2.0 * rows * (4.0 * h * h + 2.0 * h * static_cast<double>(c.ffn));
  const double attention_forward = 2.0 * 2.0 * rows * static_cast<double>(seq) * h / 2.0;
  return projections + 3.5 * attention_forward;
}

GptLayer::GptLayer(const GptLayerConfig& config, uint64_t seed, Device device)
    : config_(config),
      context_(device, seed),
      ln1_(parameters_, "ln_1", config.hidden, config.layer_norm_eps),
      attention_(parameters_, "attn", config.hidden, config.heads, config.heads,
                 config.heads > 0 ? config.hidden / config.heads : 0, true),
      ln2_(parameters_, "ln_2", config.hidden, config.layer_norm_eps),
      fc1_(parameters_, "mlp.fc1", config.hidden, config.ffn, nn::Activation::Gelu),
      fc2_(parameters_, "mlp.fc2", config.ffn, config.hidden, nn::Activation::None) {
  FP8KIT_CHECK(config.hidden > 0 && config.heads > 0 && config.ffn > 0 && config.hidden % config.heads == 0,
               "gpt layer: hidden {}, heads {} and ffn {} must be positive, heads dividing hidden", config.hidden,
               config.heads, config.ffn);
  FP8KIT_CHECK(config.layer_norm_eps > 0.0f, "gpt layer: layer_norm_eps must be positive, got {}",
               config.layer_norm_eps);
  parameters_.allocate(Device::Cpu);
  std::mt19937_64 rng(seed);
  for (nn::Parameter* p : parameters_.parameters())
    if (p->shape.size() == 2) nn::fill_normal(p->value.span<float>(), 0.02f, rng);  // biases 0, norms 1 and 0
  if (device != Device::Cpu) parameters_.allocate(device);
  set_precision(Precision::Fp32);
}

std::array<nn::Linear*, 6> GptLayer::linears() {
  const std::array<nn::Linear*, 4> a = attention_.linears();
  return {a[0], a[1], a[2], a[3], &fc1_, &fc2_};
}

void GptLayer::set_precision(Precision precision, const Fp8Recipe& recipe) {
  precision_ = precision;
  scaling_.reset();
  if (precision == Precision::Fp8) scaling_.emplace(recipe);
  ops::ScalingTable* table = scaling_ ? &*scaling_ : nullptr;
  attention_.set_precision(precision, table);
  fc1_.set_precision(precision, table);
  fc2_.set_precision(precision, table);
  if (table != nullptr) table->allocate(context_.device());
  trained_forward_ = false;
}

const Tensor& GptLayer::forward(const Tensor& x, int64_t batch, int64_t seq, bool training) {
  ops::Context& c = context_;
  FP8KIT_CHECK(batch > 0 && seq > 0, "gpt layer: batch {} and seq {} must be positive", batch, seq);
  FP8KIT_CHECK(x.rank() == 2 && x.dim(0) == batch * seq && x.dim(1) == config_.hidden && x.dtype() == DType::F32,
               "gpt layer: x must be [batch * seq = {}, hidden = {}] f32", batch * seq, config_.hidden);
  rows_ = batch * seq;
  if (scaling_ && !training) scaling_->clear_evaluation_amaxes(c);
  c.fork(ops::Lane::A);  // the weights' casts for this step, beside the first LayerNorm
  {
    const ops::Context::OnLane lane(c, ops::Lane::A);
    std::vector<ops::LinearOp*> ops;
    for (nn::Linear* l : linears()) ops.push_back(&l->op());
    ops::linear_prepare_weights(c, ops, training);
  }
  const Tensor& h = ln1_.forward(c, x, bf16());
  c.join(ops::Lane::A);
  attention_.forward(c, h, batch, seq, nullptr, training, bf16(), {{}, &x, &mid_});
  const Tensor& h2 = ln2_.forward(c, mid_, bf16());
  // fc1's bias and GELU ride in fc2's input cast (on the GPU the backward forms GELU's input again).
  const Tensor& hidden = fc1_.forward(c, h2, training, {.deferred = true});
  fc2_.forward(c, hidden, training, {{}, &mid_, &out_}, &fc1_);
  trained_forward_ = training;
  return out_;
}

const Tensor& GptLayer::backward(const Tensor& dy) {
  ops::Context& c = context_;
  FP8KIT_CHECK(trained_forward_, "gpt layer: backward() needs a preceding forward(training=true)");
  FP8KIT_CHECK(dy.rank() == 2 && dy.dim(0) == rows_ && dy.dim(1) == config_.hidden && dy.dtype() == DType::F32,
               "gpt layer: dy must be [{}, {}] f32, the forward's output shape", rows_, config_.hidden);
  trained_forward_ = false;  // one backward per forward: the FP8 state moves once per step
  const Tensor& d_h2 = fc1_.backward(c, fc2_.backward(c, dy));
  ln2_.backward(c, d_h2, dy, d_mid_);  // the residual streams' sums inside the norms' dx passes
  const Tensor& d_h = attention_.backward(c, d_mid_);
  ln1_.backward(c, d_h, d_mid_, dx_);
  c.join_all();  // the weight and norm gradients (other lanes) before the scaling update
  if (scaling_) {
    c.fork(ops::Lane::Side);
    const ops::Context::OnLane side(c, ops::Lane::Side);
    scaling_->update(c);
  }
  return dx_;
}

std::vector<nn::StateTensor> GptLayer::fp8_state() {
  return scaling_ ? nn::state_tensors(scaling_->state()) : std::vector<nn::StateTensor>{};
}

}  // namespace fp8kit::models
