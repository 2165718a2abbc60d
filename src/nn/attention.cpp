// Causal self-attention layer: projections around the ops/attention core.
#include "nn/attention.h"

#include "ops/attention.h"

namespace fp8kit::nn {

CausalSelfAttention::CausalSelfAttention(std::string path, int64_t hidden, int64_t heads, int64_t head_dim,
                                         float dropout, uint32_t dropout_site)
    : query(path + "/query", hidden, heads * head_dim, {hidden, heads, head_dim}, {heads, head_dim}, Activation::None),
      key(path + "/key", hidden, heads * head_dim, {hidden, heads, head_dim}, {heads, head_dim}, Activation::None),
      value(path + "/value", hidden, heads * head_dim, {hidden, heads, head_dim}, {heads, head_dim}, Activation::None),
      output(path + "/attention_output", heads * head_dim, hidden, {heads, head_dim, hidden}, {hidden},
             Activation::None),
      hidden_(hidden),
      heads_(heads),
      head_dim_(head_dim),
      dropout_(dropout),
      site_(dropout_site) {}

void CausalSelfAttention::set_precision(Precision precision, const Fp8Recipe& recipe) {
  for (Linear* l : {&query, &key, &value, &output}) l->set_precision(precision, recipe);
  bf16_ = precision != Precision::Fp32;
}

std::span<const float> CausalSelfAttention::forward(std::span<const float> x, int64_t batch, int64_t seq,
                                                    bool training, uint64_t seed, uint64_t step) {
  const int64_t rows = batch * seq;
  q_ = query.forward(x, rows, training);
  k_ = key.forward(x, rows, training);
  v_ = value.forward(x, rows, training);
  batch_ = batch;
  seq_ = seq;
  if (training && dropout_ > 0.0f) {
    mask_.emplace(seed, step, site_, dropout_);
  } else {
    mask_.reset();
  }
  probs_.resize({batch, heads_, seq, seq});
  context_.resize({batch, seq, heads_ * head_dim_});
  const ops::AttentionShape shape{batch, seq, heads_, head_dim_};
  ops::causal_attention_forward(shape, q_.data(), k_.data(), v_.data(), mask_ ? &*mask_ : nullptr, dropout_, bf16_,
                                probs_.data<float>(), context_.data<float>());
  return output.forward(context_.span<float>(), rows, training);
}

std::span<const float> CausalSelfAttention::backward(std::span<const float> dout) {
  const std::span<const float> dcontext = output.backward(dout);
  const int64_t n = batch_ * seq_ * heads_ * head_dim_;
  dq_.resize({n});
  dk_.resize({n});
  dv_.resize({n});
  const ops::AttentionShape shape{batch_, seq_, heads_, head_dim_};
  ops::causal_attention_backward(shape, q_.data(), k_.data(), v_.data(), probs_.data<float>(),
                                 mask_ ? &*mask_ : nullptr, dropout_, bf16_, dcontext.data(), dq_.data<float>(),
                                 dk_.data<float>(), dv_.data<float>());
  const auto dxq = query.backward(dq_.span<float>());
  const auto dxk = key.backward(dk_.span<float>());
  const auto dxv = value.backward(dv_.span<float>());
  dx_.resize({batch_ * seq_, hidden_});
  float* dx = dx_.data<float>();
  const int64_t m = static_cast<int64_t>(dxq.size());
#pragma omp parallel for schedule(static) if (m >= 65536)
  for (int64_t i = 0; i < m; ++i) dx[i] = dxq[i] + dxk[i] + dxv[i];
  return dx_.span<float>();
}

}  // namespace fp8kit::nn
