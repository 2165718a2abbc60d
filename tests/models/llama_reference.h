// A slow, obviously-correct Llama forward in double precision, straight from Hugging Face's
// modeling_llama.py (one loop per formula), for the model tests: logits and the mean next-token loss.
#pragma once

#include "models/llama_config.h"

#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace fp8kit::testing {

// Parameters by HF name, row-major as the model stores them ([out, in] for Linears).
using Weights = std::map<std::string, std::vector<double>>;

class LlamaReference {
 public:
  LlamaReference(const models::LlamaConfig& c, const Weights& w) : c_(c), w_(w) {}

  // tokens [batch, seq] -> logits [batch * seq, vocab].
  std::vector<double> logits(const std::vector<int32_t>& tokens, int64_t batch, int64_t seq) const {
    const int64_t H = c_.hidden_size, V = c_.vocab_size;
    std::vector<double> out;
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<std::vector<double>> x(seq);
      for (int64_t t = 0; t < seq; ++t) {
        const double* e = &w("model.embed_tokens.weight")[tokens[b * seq + t] * H];
        x[t].assign(e, e + H);
      }
      for (int64_t l = 0; l < c_.num_hidden_layers; ++l) {
        const std::string p = "model.layers." + std::to_string(l);
        std::vector<std::vector<double>> h(seq);
        for (int64_t t = 0; t < seq; ++t) h[t] = rms_norm(x[t], w(p + ".input_layernorm.weight"));
        const auto o = attention(h, p + ".self_attn");
        for (int64_t t = 0; t < seq; ++t) {
          const auto a = linear(o[t], p + ".self_attn.o_proj.weight", H);
          for (int64_t i = 0; i < H; ++i) x[t][i] += a[i];
        }
        for (int64_t t = 0; t < seq; ++t) {
          const auto h2 = rms_norm(x[t], w(p + ".post_attention_layernorm.weight"));
          auto g = linear(h2, p + ".mlp.gate_proj.weight", c_.intermediate_size);
          const auto u = linear(h2, p + ".mlp.up_proj.weight", c_.intermediate_size);
          for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
          const auto d = linear(g, p + ".mlp.down_proj.weight", H);
          for (int64_t i = 0; i < H; ++i) x[t][i] += d[i];
        }
      }
      const std::string head = c_.tie_word_embeddings ? "model.embed_tokens.weight" : "lm_head.weight";
      for (int64_t t = 0; t < seq; ++t) {
        const auto z = linear(rms_norm(x[t], w("model.norm.weight")), head, V);
        out.insert(out.end(), z.begin(), z.end());
      }
    }
    return out;
  }

  // The mean over positions with target >= 0 of logsumexp(logits) - logits[target].
  double loss(const std::vector<int32_t>& tokens, const std::vector<int32_t>& targets, int64_t batch,
              int64_t seq) const {
    const std::vector<double> z = logits(tokens, batch, seq);
    const int64_t V = c_.vocab_size;
    double sum = 0;
    int64_t count = 0;
    for (int64_t r = 0; r < batch * seq; ++r) {
      if (targets[r] < 0) continue;
      double m = -INFINITY, s = 0;
      for (int64_t v = 0; v < V; ++v) m = std::max(m, z[r * V + v]);
      for (int64_t v = 0; v < V; ++v) s += std::exp(z[r * V + v] - m);
      sum += m + std::log(s) - z[r * V + targets[r]];
      ++count;
    }
    return sum / static_cast<double>(count);
  }

 private:
  const std::vector<double>& w(const std::string& name) const { return w_.at(name); }

  std::vector<double> rms_norm(const std::vector<double>& x, const std::vector<double>& g) const {
    double ss = 0;
    for (double v : x) ss += v * v;
    const double r = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + c_.rms_norm_eps);
    std::vector<double> y(x.size());
    for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * g[i];
    return y;
  }

  // y = W x with W [out, in].
  std::vector<double> linear(const std::vector<double>& x, const std::string& name, int64_t out) const {
    const std::vector<double>& W = w(name);
    const int64_t in = static_cast<int64_t>(x.size());
    std::vector<double> y(out, 0.0);
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) y[o] += W[o * in + i] * x[i];
    return y;
  }

  // rotate_half at position t, per head of D.
  void rope(std::vector<double>& v, int64_t heads, int64_t t) const {
    const int64_t D = c_.head_dim, half = D / 2;
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t i = 0; i < half; ++i) {
        const double angle = static_cast<double>(t) * std::pow(c_.rope_theta, -2.0 * static_cast<double>(i) / D);
        const double a = v[h * D + i], b = v[h * D + i + half];
        v[h * D + i] = a * std::cos(angle) - b * std::sin(angle);
        v[h * D + i + half] = b * std::cos(angle) + a * std::sin(angle);
      }
  }

  std::vector<std::vector<double>> attention(const std::vector<std::vector<double>>& h, const std::string& p) const {
    const int64_t T = static_cast<int64_t>(h.size()), D = c_.head_dim, Hq = c_.num_attention_heads,
                  Hkv = c_.num_key_value_heads;
    std::vector<std::vector<double>> q(T), k(T), v(T), o(T, std::vector<double>(Hq * D, 0.0));
    for (int64_t t = 0; t < T; ++t) {
      q[t] = linear(h[t], p + ".q_proj.weight", Hq * D);
      k[t] = linear(h[t], p + ".k_proj.weight", Hkv * D);
      v[t] = linear(h[t], p + ".v_proj.weight", Hkv * D);
      rope(q[t], Hq, t);
      rope(k[t], Hkv, t);
    }
    for (int64_t head = 0; head < Hq; ++head) {
      const int64_t kvh = head / (Hq / Hkv);
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> s(t + 1);
        double m = -INFINITY, sum = 0;
        for (int64_t j = 0; j <= t; ++j) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += q[t][head * D + d] * k[j][kvh * D + d];
          s[j] = dot / std::sqrt(static_cast<double>(D));
          m = std::max(m, s[j]);
        }
        for (int64_t j = 0; j <= t; ++j) sum += (s[j] = std::exp(s[j] - m));
        for (int64_t j = 0; j <= t; ++j)
          for (int64_t d = 0; d < D; ++d) o[t][head * D + d] += s[j] / sum * v[j][kvh * D + d];
      }
    }
    return o;
  }

  models::LlamaConfig c_;
  const Weights& w_;
};

}  // namespace fp8kit::testing
