// The inference engine: weights as the GEMMs read them, the forward of a prefill or a decode step on
// bf16 activations, CUDA graphs for decode steps, calibration statistics and warm-up scales.
#include "infer/llama_engine.h"

#include "base/error.h"
#include "exec/captured_step.h"
#include "io/hf_model.h"
#include "numerics/convert.h"
#include "numerics/histogram.h"
#include "numerics/scale.h"
#include "ops/activation_out.h"
#include "ops/activation_stats.h"
#include "ops/embedding.h"
#include "ops/init.h"
#include "ops/matmul.h"
#include "ops/quantize.h"
#include "ops/rms_norm.h"
#include "ops/rope.h"
#include "ops/sampling.h"
#include "ops/sdpa.h"
#include "ops/swiglu.h"
#include "numerics/format.h"
#include "quant/packed_model.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <string>
#include <string_view>

namespace fp8kit::infer {

using models::LlamaConfig;

namespace {

std::string layer_name(int64_t i) { return "model.layers." + std::to_string(i); }

// The four GEMMs of a block, in the order the forward runs them.
enum Gemm { Qkv, O, GateUp, Down, kGemms };

// One GEMM's weight [out, in] as the forward multiplies it: bf16, or E4M3 codes with their scales,
// and how its input is quantized.
struct Projection {
  std::vector<std::string> parts;  // the HF modules it fuses, in row order ("...q_proj", "...k_proj", ...)
  int64_t in = 0, out = 0;
  Tensor bf16;
  QTensor fp8;
  bool is_fp8 = false;
  QuantSpec input_spec{};  // FP8: PerTensor (static, `input_scale`), PerRow (per token) or PerGroup 128 (blocks)
  Tensor input_scale;      // [1] f32: the static quantization multiplier
  float static_amax = 0;   // the calibrated or warmed-up amax the scale came from (0: none)
  Tensor warm_amax;        // WarmUp: [1] f32, the max over the warm-up passes' per-token amaxes
  Tensor tensor_scale_inv; // WarmUp of a per-tensor weight: its scale, restored when the scales freeze

  // An FP8 weight whose input is cast at a static per-tensor scale (input_scale).
  bool static_input() const { return is_fp8 && input_spec.granularity == Granularity::PerTensor; }
};

struct Block {
  Tensor input_norm, post_norm;  // [hidden] f32
  std::array<Projection, kGemms> gemm;
  ops::KvCacheLayer cache;
};

// One forward's buffers: the prefill's, and each decode batch size's (a captured graph keeps
// pointers to them, so no other forward may resize them).
struct Activations {
  Tensor tokens, positions, slots, lengths, last_rows;  // i32, on the device
  Tensor pad_rows, packed_rows;                         // i32: a ragged prefill's maps (Impl::prefill)
  Tensor residual, delta, hidden, last, logits;
  Tensor qkv, q, k, v, attn, lse, gate_up;
  Tensor q_pad, k_pad, v_pad, attn_pad;  // a ragged prefill's attention, padded
  std::array<Tensor, kGemms> x;  // bf16 inputs of bf16 GEMMs
  std::array<QTensor, kGemms> xq;
};

// t as a [rows, cols] tensor of `dtype` on `device`, reusing its storage when it has that dtype and device.
void shape(Tensor& t, int64_t rows, int64_t cols, DType dtype, Device device) {
  if (t.dtype() == dtype && t.device() == device && t.numel() > 0) return t.resize({rows, cols});
  t = Tensor({rows, cols}, dtype, device);
}

Tensor i32_tensor(std::span<const int32_t> values, Device device) {
  Tensor t({static_cast<int64_t>(values.size())}, DType::I32);
  if (!values.empty()) std::memcpy(t.data<int32_t>(), values.data(), values.size_bytes());
  return t.to(device);
}

Tensor f32_scalar(float value, Device device) {
  Tensor t({1}, DType::F32);
  t.data<float>()[0] = value;
  return t.to(device);
}

// Host bf16 bits of an HF tensor (F32, BF16 or F16).
std::vector<uint16_t> bf16_of(const io::TensorView& view) { return io::f32_to_bf16(io::tensor_to_f32(view)); }

Tensor bf16_tensor(std::vector<int64_t> shape, std::span<const uint16_t> bits, Device device) {
  Tensor t(std::move(shape), DType::Bf16);
  FP8KIT_CHECK(static_cast<size_t>(t.numel()) == bits.size(), "bf16 tensor: {} values for {} elements", bits.size(),
               t.numel());
  std::memcpy(t.data<uint16_t>(), bits.data(), bits.size_bytes());
  return t.to(device);
}

// A vector (a norm's weight) as f32 on `device`.
Tensor f32_tensor(const io::TensorView& view, Device device) {
  Tensor t({view.shape.at(0)}, DType::F32);
  io::tensor_to_f32(view, t.span<float>());
  return t.to(device);
}

// Packed projections that share an input (q/k/v, gate/up) as one weight on `device`: codes stacked
// by rows, scales too. Per-tensor scales that differ become per-row ones (exact: every row keeps its
// own multiplier); 128x128 blocks need every part but the last to end on a block boundary.
QTensor fuse_packed(std::span<const quant::PackedLinear> parts, Device device) {
  const quant::PackedLinear& first = parts.front();
  const int64_t in = first.weight->shape.at(1);
  bool same_tensor_scale = true;
  int64_t out = 0;
  for (const quant::PackedLinear& p : parts) {
    FP8KIT_CHECK(p.format() == first.format() && p.granularity == first.granularity && p.group == first.group,
                 "{} and {} are quantized differently; the runtime fuses them into one GEMM: pack them alike",
                 first.name, p.name);
    same_tensor_scale = same_tensor_scale && p.scale_inv() == first.scale_inv();
    out += p.weight->shape.at(0);
  }
  Granularity g = first.granularity;
  FP8KIT_CHECK(g != Granularity::PerGroup || first.group == 128,
               "{}: weights in groups of {} cannot run here (the FP8 GEMMs take per-tensor, per-channel, 128-group "
               "and 128x128-block scales): pack with another --weights",
               first.name, first.group);
  if (g == Granularity::PerTensor && !same_tensor_scale) g = Granularity::PerRow;
  QTensor q;
  q.spec = {first.format(), g, 128};
  const BlockShape block = q.spec.block(out, in);
  Tensor codes({out, in}, dtype_of(first.format()));
  Tensor scales({static_cast<int64_t>((out + block.rows - 1) / block.rows),
                 static_cast<int64_t>((in + block.cols - 1) / block.cols)},
                DType::F32);
  std::byte* c = codes.data<std::byte>();
  float* s = scales.data<float>();
  int64_t row = 0;
  for (const quant::PackedLinear& p : parts) {
    const int64_t rows = p.weight->shape.at(0);
    FP8KIT_CHECK(g != Granularity::Block128x128 || row % 128 == 0,
                 "{} starts at row {} of its fused GEMM, inside a 128x128 scale block (the runtime fuses q/k/v and "
                 "gate/up: block scales need their rows in multiples of 128): pack with another --weights",
                 p.name, row);
    std::memcpy(c, p.weight->data.data(), p.weight->data.size());
    c += p.weight->data.size();
    const std::vector<float> part = p.scale_inv();
    if (g == Granularity::PerTensor) {
      s[0] = part[0];
    } else if (g == Granularity::PerRow && p.granularity == Granularity::PerTensor) {
      s = std::fill_n(s, rows, part[0]);
    } else {
      s = std::copy(part.begin(), part.end(), s);
    }
    row += rows;
  }
  q.codes = codes.to(device);
  q.scale_inv = scales.to(device);
  q.amax = Tensor(q.scale_inv.shape(), DType::F32, device);
  return q;
}

}  // namespace

struct LlamaEngine::Impl {
  LlamaConfig config;
  EngineOptions options;
  ops::Context c;
  ActivationScaling scaling = ActivationScaling::Dynamic;
  int forwards = 0;  // FP8 WarmUp: forwards so far
  bool default_kv_scales = false;  // E4M3 KV cache: some layer at options.default_kv_scale

  Tensor embed;    // [vocab, hidden] bf16
  Tensor lm_head;  // [vocab, hidden] bf16 (a view of embed when tied)
  Tensor norm;     // [hidden] f32
  Tensor rope;
  std::vector<Block> blocks;
  std::vector<int64_t> lengths;  // tokens per slot

  Activations prefill_buffers;
  struct DecodeStep {
    Activations buffers;
    std::optional<exec::CapturedStep> graph;
    uint64_t scratch_generation = 0;
  };
  std::map<int64_t, DecodeStep> decode_steps;  // by batch size

  quant::CalibrationStats* calibration = nullptr;
  struct Recorded {  // an activation's statistics on the device since the last drain
    std::string name;
    Tensor amax;       // [channels] f32
    Tensor histogram;  // [kHistogramBins] i32
  };
  std::vector<Recorded> recorded;

  Impl(const LlamaConfig& cfg, Device device, const EngineOptions& opts) : config(cfg), options(opts), c(device) {
    models::validate_llama_config(config);
    if (options.max_seq == 0) options.max_seq = config.max_position_embeddings;
    FP8KIT_CHECK(options.max_batch >= 1, "engine: max_batch must be >= 1, not {}", options.max_batch);
    FP8KIT_CHECK(options.max_seq >= 1 && options.max_seq <= config.max_position_embeddings,
                 "engine: max_seq {} must be in [1, max_position_embeddings = {}]", options.max_seq,
                 config.max_position_embeddings);
    FP8KIT_CHECK(options.kv_cache == DType::Bf16 || options.kv_cache == DType::E4M3,
                 "engine: the KV cache holds bf16 or e4m3, not {}", name(options.kv_cache));
    FP8KIT_CHECK(std::isfinite(options.default_kv_scale) && options.default_kv_scale > 0,
                 "engine: the default KV scale must be finite and > 0, not {}", options.default_kv_scale);
    lengths.assign(static_cast<size_t>(options.max_batch), 0);
    blocks.resize(static_cast<size_t>(config.num_hidden_layers));
    const int64_t h = config.hidden_size, d = config.head_dim, f = config.intermediate_size;
    const int64_t q = config.num_attention_heads * d, kv = config.num_key_value_heads * d;
    for (size_t i = 0; i < blocks.size(); ++i) {
      const std::string attn = layer_name(static_cast<int64_t>(i)) + ".self_attn.";
      const std::string mlp = layer_name(static_cast<int64_t>(i)) + ".mlp.";
      auto& g = blocks[i].gemm;
      g[Qkv].parts = {attn + "q_proj", attn + "k_proj", attn + "v_proj"};
      g[Qkv].in = h, g[Qkv].out = q + 2 * kv;
      g[O].parts = {attn + "o_proj"};
      g[O].in = q, g[O].out = h;
      g[GateUp].parts = {mlp + "gate_proj", mlp + "up_proj"};
      g[GateUp].in = h, g[GateUp].out = 2 * f;
      g[Down].parts = {mlp + "down_proj"};
      g[Down].in = f, g[Down].out = h;
    }
    ops::rope_table(c, config.max_position_embeddings, d, config.rope_theta, rope);
  }

  Device device() const { return c.device(); }
  int64_t part_rows(const std::string& part) const {
    const int64_t d = config.head_dim;
    if (part.ends_with("q_proj")) return config.num_attention_heads * d;
    if (part.ends_with("k_proj") || part.ends_with("v_proj")) return config.num_key_value_heads * d;
    if (part.ends_with("o_proj") || part.ends_with("down_proj")) return config.hidden_size;
    return config.intermediate_size;  // gate_proj, up_proj
  }

  // The KV caches, with per-head scales (E4M3) from `k_scales`/`v_scales` per layer (empty: the default).
  void make_caches(const std::vector<std::vector<float>>& k_scales, const std::vector<std::vector<float>>& v_scales) {
    const int64_t kv_heads = config.num_key_value_heads;
    auto per_head = [&](const std::vector<std::vector<float>>& scales, size_t layer) {
      std::vector<float> s(static_cast<size_t>(kv_heads), options.default_kv_scale);
      default_kv_scales = default_kv_scales || layer >= scales.size() || scales[layer].empty();
      if (layer < scales.size() && !scales[layer].empty()) {
        const auto& given = scales[layer];
        FP8KIT_CHECK(given.size() == 1 || given.size() == s.size(),
                     "layer {}: {} KV scales for {} KV heads (give 1 or one per head)", layer, given.size(), kv_heads);
        for (size_t i = 0; i < s.size(); ++i) s[i] = given.size() == 1 ? given[0] : given[i];
      }
      Tensor t({kv_heads}, DType::F32);
      std::copy(s.begin(), s.end(), t.data<float>());
      return t.to(device());
    };
    for (size_t i = 0; i < blocks.size(); ++i) {
      const bool fp8 = options.kv_cache == DType::E4M3;
      blocks[i].cache = ops::make_kv_cache_layer(c, options.max_batch, options.max_seq, kv_heads, config.head_dim,
                                                 options.kv_cache, fp8 ? per_head(k_scales, i) : Tensor{},
                                                 fp8 ? per_head(v_scales, i) : Tensor{});
    }
  }

  // How FP8 inputs are scaled, once the weights are in.
  void choose_scaling(bool have_static_scales) {
    if (!fp8_weights()) return;
    scaling = options.activations.value_or(have_static_scales ? ActivationScaling::Static : ActivationScaling::Dynamic);
    FP8KIT_CHECK(scaling != ActivationScaling::Static || have_static_scales,
                 "static activation scales need a model packed with input_scale (calibrate, then pack with "
                 "--activations static), or use dynamic or warm-up scaling");
    FP8KIT_CHECK(options.warm_up_passes >= 1, "engine: warm_up_passes must be >= 1");
    for (Block& b : blocks) {
      for (Projection& p : b.gemm) {
        if (!p.is_fp8) continue;
        const Granularity w = p.fp8.spec.granularity;
        if (w == Granularity::Block128x128 || w == Granularity::PerGroup) {
          p.input_spec = {Fp8Format::E4M3, Granularity::PerGroup, 128};  // DeepSeek-V3's 1x128 activations
          continue;
        }
        if (scaling == ActivationScaling::Static) {
          p.input_spec = {Fp8Format::E4M3, Granularity::PerTensor};
        } else {
          p.input_spec = {Fp8Format::E4M3, Granularity::PerRow};
          if (p.fp8.spec.granularity == Granularity::PerTensor) p.tensor_scale_inv = p.fp8.scale_inv.clone();
          as_per_row(p.fp8);  // per token x per channel
          if (scaling == ActivationScaling::WarmUp) p.warm_amax = f32_scalar(0.0f, device());
        }
      }
    }
  }

  bool fp8_weights() const { return !blocks.empty() && blocks[0].gemm[Qkv].is_fp8; }

  // A per-tensor scaled weight as per-row scaled (every row the same scale_inv): exact.
  void as_per_row(QTensor& w) {
    if (w.spec.granularity != Granularity::PerTensor) return;
    const float s = w.scale_inv.to(Device::Cpu).data<float>()[0];
    Tensor rows({w.rows(), 1}, DType::F32);
    std::fill_n(rows.data<float>(), w.rows(), s);
    w.scale_inv = rows.to(device());
    w.amax = Tensor({w.rows(), 1}, DType::F32, device());
    w.spec.granularity = Granularity::PerRow;
  }

  // --- the forward ---------------------------------------------------------------------------

  ops::ActivationOut input_of(Projection& p, Activations& a, Gemm g) {
    if (!p.is_fp8) return {.bf16 = &a.x[g]};
    if (p.input_spec.granularity == Granularity::PerGroup) return {.bf16 = &a.x[g]};  // quantized by run_gemm
    // A static scale's amax is read by nothing: no zeroing queued per projection in a decode graph.
    return {.fp8 = &a.xq[g], .spec = p.input_spec, .scale = p.static_input() ? &p.input_scale : nullptr,
            .record_amax = !p.static_input()};
  }

  // y [rows, out] = input . W^T, from what input_of() wrote, or from the bf16 `input` (the attention
  // output, quantized here for an FP8 weight).
  void run_gemm(Projection& p, Activations& a, Gemm g, int64_t rows, Tensor& y, const Tensor* input = nullptr) {
    shape(y, rows, p.out, DType::Bf16, device());
    const Tensor& x = input != nullptr ? *input : a.x[g];
    if (!p.is_fp8) return ops::matmul(c, x, p.bf16, y, {.constant_b = true});
    QTensor& xq = a.xq[g];
    if (input != nullptr || p.input_spec.granularity == Granularity::PerGroup)
      ops::quantize(c, x, p.input_spec, xq, p.static_input() ? &p.input_scale : nullptr);
    if (scaling == ActivationScaling::WarmUp && p.input_spec.granularity == Granularity::PerRow)
      ops::accumulate_activation_stats(c, xq.amax.view(0, {rows, 1}), p.warm_amax, nullptr);
    // Hopper's fast accumulation, as Transformer Engine's forward GEMMs (block scales take none).
    ops::matmul(c, xq, p.fp8, y,
                {.fast_accumulation = p.input_spec.granularity != Granularity::PerGroup, .constant_b = true});
  }

  void record(const std::string& name, const Tensor& x) {
    auto it = std::find_if(recorded.begin(), recorded.end(), [&](const Recorded& r) { return r.name == name; });
    if (it == recorded.end())
      it = recorded.insert(recorded.end(), {name, Tensor({x.dim(1)}, DType::F32, device()),
                                            Tensor({kHistogramBins}, DType::I32, device())});
    ops::accumulate_activation_stats(c, x, it->amax, &it->histogram);
  }


  // The forward of `rows` tokens in a.tokens at a.positions of a.slots. Prefill (batch prompts from
  // position 0, packed one after the other, each a.lengths tokens, at most seq) when seq > 0, else a
  // decode step (one token per slot, a.lengths cached tokens after it). A prefill of rows < batch *
  // seq (prompts of different lengths) attends on copies padded to seq: padded row b * seq + t is
  // packed row a.pad_rows[b * seq + t], and packed row r is padded row a.packed_rows[r].
  void forward(Activations& a, int64_t rows, int64_t batch, int64_t seq, bool all_positions) {
    const bool prefill = seq > 0;
    const bool calibrating = calibration != nullptr && prefill;
    const int64_t heads = config.num_attention_heads;
    const float eps = static_cast<float>(config.rms_norm_eps);
    ops::gather_rows(c, embed, a.tokens, a.residual);
    for (size_t l = 0; l < blocks.size(); ++l) {
      Block& b = blocks[l];
      auto& g = b.gemm;
      ops::add_rms_norm(c, a.residual, l == 0 ? nullptr : &a.delta, b.input_norm, eps, input_of(g[Qkv], a, Qkv));
      if (calibrating)
        for (const std::string& part : g[Qkv].parts) record(part, a.x[Qkv]);
      run_gemm(g[Qkv], a, Qkv, rows, a.qkv);
      if (prefill) {
        ops::kv_append(c, rope, a.qkv, a.positions, a.slots, heads, b.cache, a.q, &a.k, &a.v);
        if (calibrating) {
          const std::string attention = layer_name(static_cast<int64_t>(l)) + ".self_attn.";
          record(attention + "k_cache", a.k);
          record(attention + "v_cache", a.v);
        }
        const ops::SdpaShape shape{batch, seq, heads, config.num_key_value_heads, config.head_dim, true};
        if (rows == batch * seq) {
          ops::sdpa_forward(c, shape, a.q.view(0, {batch, seq, a.q.dim(1)}), a.k.view(0, {batch, seq, a.k.dim(1)}),
                            a.v.view(0, {batch, seq, a.v.dim(1)}), true, a.attn, a.lse);
        } else {
          ops::gather_rows(c, a.q, a.pad_rows, a.q_pad);
          ops::gather_rows(c, a.k, a.pad_rows, a.k_pad);
          ops::gather_rows(c, a.v, a.pad_rows, a.v_pad);
          ops::sdpa_forward(c, shape, a.q_pad.view(0, {batch, seq, a.q.dim(1)}),
                            a.k_pad.view(0, {batch, seq, a.k.dim(1)}), a.v_pad.view(0, {batch, seq, a.v.dim(1)}), true,
                            a.attn_pad, a.lse, &a.lengths);
          ops::gather_rows(c, a.attn_pad.view(0, {batch * seq, a.q.dim(1)}), a.packed_rows, a.attn);
        }
        const Tensor attn = a.attn.view(0, {rows, a.q.dim(1)});
        if (calibrating) record(g[O].parts[0], attn);
        run_gemm(g[O], a, O, rows, a.delta, &attn);
      } else {
        ops::kv_append(c, rope, a.qkv, a.positions, a.slots, heads, b.cache, a.q, nullptr, nullptr);
        // An FP8 output projection at a static scale reads codes the attention writes in its own pass.
        const bool quantized = g[O].static_input();
        ops::decode_attention(c, a.q, b.cache, a.slots, a.lengths, heads, 0.0f,
                              quantized ? input_of(g[O], a, O) : ops::ActivationOut{.bf16 = &a.attn});
        run_gemm(g[O], a, O, rows, a.delta, quantized ? nullptr : &a.attn);
      }
      ops::add_rms_norm(c, a.residual, &a.delta, b.post_norm, eps, input_of(g[GateUp], a, GateUp));
      if (calibrating)
        for (const std::string& part : g[GateUp].parts) record(part, a.x[GateUp]);
      run_gemm(g[GateUp], a, GateUp, rows, a.gate_up);
      ops::swiglu(c, a.gate_up, input_of(g[Down], a, Down));
      if (calibrating) record(g[Down].parts[0], a.x[Down]);
      run_gemm(g[Down], a, Down, rows, a.delta);
    }
    ops::add_rms_norm(c, a.residual, &a.delta, norm, eps, {.bf16 = &a.hidden});
    const Tensor* h = &a.hidden;
    if (!all_positions && rows > batch) {
      ops::gather_rows(c, a.hidden, a.last_rows, a.last);
      h = &a.last;
    }
    shape(a.logits, h->dim(0), config.vocab_size, DType::F32, device());
    ops::matmul(c, *h, lm_head, a.logits, {.constant_b = true});
  }

  // The bf16 parts every model has (embedding, LM head, norms), from an HF directory's weights.
  void load_dense(const io::HfWeights& weights) {
    const int64_t h = config.hidden_size, vocab = config.vocab_size;
    auto matrix = [&](const std::string& name) {
      const std::array<int64_t, 2> shape{vocab, h};
      return bf16_tensor({vocab, h}, bf16_of(weights.at(name, shape)), device());
    };
    auto vector = [&](const std::string& name) {
      const std::array<int64_t, 1> shape{h};
      return f32_tensor(weights.at(name, shape), device());
    };
    embed = matrix("model.embed_tokens.weight");
    lm_head = config.tie_word_embeddings ? embed.view(0, {vocab, h}) : matrix("lm_head.weight");
    norm = vector("model.norm.weight");
    for (size_t i = 0; i < blocks.size(); ++i) {
      blocks[i].input_norm = vector(layer_name(static_cast<int64_t>(i)) + ".input_layernorm.weight");
      blocks[i].post_norm = vector(layer_name(static_cast<int64_t>(i)) + ".post_attention_layernorm.weight");
    }
  }

  // `where` prefixes the message (e.g. "prefill: prompt 2: ").
  void check_tokens(std::span<const int32_t> tokens, std::string_view where = "") const {
    for (size_t i = 0; i < tokens.size(); ++i)
      FP8KIT_CHECK(tokens[i] >= 0 && tokens[i] < config.vocab_size,
                   "{}token {} at {} is outside the vocabulary [0, {})", where, tokens[i], i, config.vocab_size);
  }

  // Prompts of `prompt_lengths` tokens each (>= 1, at most max_seq), packed one after the other in
  // `tokens` (ids checked), into the slots from first_slot on, in one forward: the GEMMs, norms and
  // KV appends on the packed rows; attention as it is for prompts of one length, else padded to a
  // multiple of 64 tokens (so that few cuDNN graphs serve many batches) with the lengths masking.
  const Tensor& prefill(std::span<const int32_t> tokens, std::span<const int64_t> prompt_lengths, int64_t first_slot,
                        bool all_positions) {
    const auto batch = static_cast<int64_t>(prompt_lengths.size());
    FP8KIT_CHECK(first_slot >= 0 && first_slot + batch <= options.max_batch,
                 "prefill: slots [{}, {}) outside the engine's {} (raise max_batch)", first_slot, first_slot + batch,
                 options.max_batch);
    const int64_t longest = *std::max_element(prompt_lengths.begin(), prompt_lengths.end());
    const bool ragged =
        std::any_of(prompt_lengths.begin(), prompt_lengths.end(), [&](int64_t n) { return n != longest; });
    const int64_t seq = ragged ? (longest + 63) / 64 * 64 : longest;
    const auto rows = static_cast<int64_t>(tokens.size());
    std::vector<int32_t> positions, slots, packed_rows, last, sizes;
    std::vector<int32_t> pad_rows(static_cast<size_t>(ragged ? batch * seq : 0));
    int64_t row = 0;
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t n = prompt_lengths[static_cast<size_t>(b)];
      for (int64_t t = 0; t < n; ++t) {
        positions.push_back(static_cast<int32_t>(t));
        slots.push_back(static_cast<int32_t>(first_slot + b));
        if (ragged) packed_rows.push_back(static_cast<int32_t>(b * seq + t));
      }
      // Padding copies the prompt's first row: finite values, which the attention masks.
      for (int64_t t = 0; ragged && t < seq; ++t)
        pad_rows[static_cast<size_t>(b * seq + t)] = static_cast<int32_t>(row + (t < n ? t : 0));
      row += n;
      last.push_back(static_cast<int32_t>(row - 1));
      sizes.push_back(static_cast<int32_t>(n));
    }
    Activations& a = prefill_buffers;
    a.tokens = i32_tensor(tokens, device());
    a.positions = i32_tensor(positions, device());
    a.slots = i32_tensor(slots, device());
    a.lengths = i32_tensor(sizes, device());
    a.last_rows = i32_tensor(last, device());
    if (ragged) {
      a.pad_rows = i32_tensor(pad_rows, device());
      a.packed_rows = i32_tensor(packed_rows, device());
    }
    forward(a, rows, batch, seq, all_positions);
    c.synchronize();  // the logits are ready, and the statistics readable, on return
    std::copy(prompt_lengths.begin(), prompt_lengths.end(), lengths.begin() + first_slot);
    if (calibration != nullptr) drain_calibration(batch, rows);
    after_forward();
    return a.logits;
  }

  // After every forward of an FP8 WarmUp engine: at the end of the warm-up, the static scales.
  void after_forward() {
    if (!fp8_weights() || scaling != ActivationScaling::WarmUp || ++forwards != options.warm_up_passes) return;
    for (Block& b : blocks) {
      for (Projection& p : b.gemm) {
        if (p.input_spec.granularity != Granularity::PerRow) continue;
        p.static_amax = p.warm_amax.to(Device::Cpu).data<float>()[0];
        p.input_scale = f32_scalar(current_scale(p.static_amax, Fp8Format::E4M3), device());
        p.input_spec.granularity = Granularity::PerTensor;
        if (p.tensor_scale_inv.numel() > 0) {  // per tensor x per tensor again: cuBLASLt's plainest GEMM
          p.fp8.scale_inv = std::move(p.tensor_scale_inv);
          p.fp8.amax = Tensor({1}, DType::F32, device());
          p.fp8.spec.granularity = Granularity::PerTensor;
        }
      }
    }
    // Their graphs quantized per token; the buffers stay, since a decode returns its logits from them.
    for (auto& [batch, step] : decode_steps) step.graph.reset();
  }

  void drain_calibration(int64_t prompts, int64_t tokens) {
    const Tensor zero_counts({kHistogramBins}, DType::I32);
    for (Recorded& r : recorded) {
      const Tensor amax = r.amax.to(Device::Cpu), counts = r.histogram.to(Device::Cpu);
      quant::ActivationStats batch_stats;
      batch_stats.channel_amax.assign(amax.span<float>().begin(), amax.span<float>().end());
      batch_stats.histogram.assign(counts.span<int32_t>().begin(), counts.span<int32_t>().end());
      calibration->activations[r.name].merge(batch_stats);
      r.histogram.copy_from(zero_counts);  // the i32 counts restart (the amax keeps its max)
    }
    calibration->prompts += prompts;
    calibration->tokens += tokens;
  }
};

bool is_packed(const std::filesystem::path& dir) {
  std::ifstream in(dir / "config.json");
  FP8KIT_CHECK(in.good(), "cannot read {}: a model directory holds a config.json", (dir / "config.json").string());
  const nlohmann::json config = nlohmann::json::parse(in, nullptr, false);
  FP8KIT_CHECK(!config.is_discarded() && config.is_object(), "{} is not a JSON object", (dir / "config.json").string());
  return config.contains("quantization_config") && !config["quantization_config"].is_null();
}

LlamaEngine LlamaEngine::open(const std::filesystem::path& dir, Device device, const EngineOptions& options) {
  if (is_packed(dir)) return from_packed(quant::open_packed_model(dir), device, options);
  return from_hf(dir, device, options);
}

LlamaEngine::LlamaEngine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
LlamaEngine::~LlamaEngine() = default;
LlamaEngine::LlamaEngine(LlamaEngine&&) noexcept = default;
LlamaEngine& LlamaEngine::operator=(LlamaEngine&&) noexcept = default;

LlamaEngine LlamaEngine::from_hf(const std::filesystem::path& dir, Device device, const EngineOptions& options) {
  const LlamaConfig config = models::read_llama_config(dir);
  auto m = std::make_unique<Impl>(config, device, options);
  const io::HfWeights weights = io::open_hf_weights(dir);
  m->load_dense(weights);
  for (Block& b : m->blocks) {
    for (Projection& p : b.gemm) {
      std::vector<uint16_t> fused;
      for (const std::string& part : p.parts) {
        const std::array<int64_t, 2> shape{m->part_rows(part), p.in};
        const std::vector<uint16_t> rows = bf16_of(weights.at(part + ".weight", shape));
        fused.insert(fused.end(), rows.begin(), rows.end());
      }
      p.bf16 = bf16_tensor({p.out, p.in}, fused, device);
    }
  }
  m->make_caches({}, {});
  return LlamaEngine(std::move(m));
}

LlamaEngine LlamaEngine::random(const LlamaConfig& config, const RandomWeights& w, uint64_t seed, Device device,
                                const EngineOptions& options) {
  auto m = std::make_unique<Impl>(config, device, options);
  const int64_t h = config.hidden_size;
  uint64_t stream = seed;
  auto normal = [&](std::vector<int64_t> shape) {
    Tensor t(std::move(shape), DType::Bf16, device);
    ops::fill_normal(m->c, t, 0.02f, stream++);
    m->c.synchronize();  // before ops without a context (quantize) read it
    return t;
  };
  auto ones = [&]() {
    Tensor t({h}, DType::F32);
    std::fill_n(t.data<float>(), h, 1.0f);
    return t.to(device);
  };
  m->embed = normal({config.vocab_size, h});
  m->lm_head = config.tie_word_embeddings ? m->embed.view(0, {config.vocab_size, h}) : normal({config.vocab_size, h});
  m->norm = ones();
  for (Block& b : m->blocks) {
    b.input_norm = ones();
    b.post_norm = ones();
    for (Projection& p : b.gemm) {
      Tensor weight = normal({p.out, p.in});
      if (!w.fp8) {
        p.bf16 = std::move(weight);
        continue;
      }
      FP8KIT_CHECK(w.granularity == Granularity::PerTensor || w.granularity == Granularity::PerRow,
                   "random FP8 weights are per tensor or per channel");
      p.fp8 = ops::quantize(weight, {Fp8Format::E4M3, w.granularity});
      p.is_fp8 = true;
    }
  }
  m->c.synchronize();
  m->make_caches({}, {});
  m->choose_scaling(false);
  return LlamaEngine(std::move(m));
}

LlamaEngine LlamaEngine::from_packed(const quant::PackedModel& model, Device device, const EngineOptions& options) {
  const LlamaConfig& config = model.config();
  auto m = std::make_unique<Impl>(config, device, options);
  m->load_dense(model.weights());
  bool all_static = true;
  std::vector<std::vector<float>> k_scales, v_scales;
  for (size_t i = 0; i < m->blocks.size(); ++i) {
    Block& b = m->blocks[i];
    k_scales.push_back(model.k_scale(static_cast<int64_t>(i)));
    v_scales.push_back(model.v_scale(static_cast<int64_t>(i)));
    for (Projection& p : b.gemm) {
      std::vector<quant::PackedLinear> parts;
      bool dense = false;  // a module the quantization config ignores: the fused GEMM runs in bf16
      for (const std::string& part : p.parts) {
        parts.push_back(model.linear(part));
        dense = dense || !parts.back().fp8();
      }
      if (dense) {
        std::vector<uint16_t> fused;
        for (const quant::PackedLinear& part : parts) {
          const std::vector<uint16_t> bits = io::f32_to_bf16(quant::dequantize(part));
          fused.insert(fused.end(), bits.begin(), bits.end());
        }
        p.bf16 = bf16_tensor({p.out, p.in}, fused, device);
        all_static = false;
        continue;
      }
      p.fp8 = fuse_packed(parts, device);
      p.is_fp8 = true;
      float input_scale = 0;  // fused parts share their input: the largest of their static scales
      for (const quant::PackedLinear& part : parts) {
        if (!part.input_scale) all_static = false;
        else input_scale = std::max(input_scale, *part.input_scale);
      }
      if (input_scale > 0) {
        p.static_amax = input_scale * fp8_max(Fp8Format::E4M3);
        p.input_scale = f32_scalar(1.0f / input_scale, device);
      }
    }
  }
  m->make_caches(k_scales, v_scales);
  m->choose_scaling(all_static);
  return LlamaEngine(std::move(m));
}

const LlamaConfig& LlamaEngine::config() const { return impl_->config; }
const EngineOptions& LlamaEngine::options() const { return impl_->options; }
ops::Context& LlamaEngine::context() { return impl_->c; }
bool LlamaEngine::fp8_weights() const { return impl_->fp8_weights(); }
bool LlamaEngine::default_kv_scales() const { return impl_->default_kv_scales; }

int64_t LlamaEngine::weight_bytes() const {
  const Impl& m = *impl_;
  int64_t bytes = static_cast<int64_t>(m.embed.nbytes() + m.norm.nbytes());
  if (!m.config.tie_word_embeddings) bytes += static_cast<int64_t>(m.lm_head.nbytes());
  for (const Block& b : m.blocks) {
    bytes += static_cast<int64_t>(b.input_norm.nbytes() + b.post_norm.nbytes());
    for (const Projection& p : b.gemm)
      bytes += static_cast<int64_t>(p.is_fp8 ? p.fp8.codes.nbytes() + p.fp8.scale_inv.nbytes() : p.bf16.nbytes());
  }
  return bytes;
}

int64_t LlamaEngine::kv_cache_bytes() const {
  int64_t bytes = 0;
  for (const Block& b : impl_->blocks) bytes += static_cast<int64_t>(b.cache.k.nbytes() + b.cache.v.nbytes());
  return bytes;
}

const Tensor& LlamaEngine::prefill(std::span<const int32_t> tokens, int64_t batch, int64_t seq, int64_t first_slot,
                                   bool all_positions) {
  Impl& m = *impl_;
  FP8KIT_CHECK(batch >= 1 && seq >= 1 && static_cast<int64_t>(tokens.size()) == batch * seq,
               "prefill: {} tokens for {} sequences of {}", tokens.size(), batch, seq);
  FP8KIT_CHECK(seq <= m.options.max_seq, "prefill: {} tokens per sequence exceed the KV cache's {} (raise max_seq)",
               seq, m.options.max_seq);
  m.check_tokens(tokens);
  const std::vector<int64_t> lengths(static_cast<size_t>(batch), seq);
  return m.prefill(tokens, lengths, first_slot, all_positions);
}

const Tensor& LlamaEngine::prefill(std::span<const std::vector<int32_t>> prompts, int64_t first_slot,
                                   bool all_positions) {
  Impl& m = *impl_;
  FP8KIT_CHECK(!prompts.empty(), "prefill: no prompts");
  std::vector<int32_t> tokens;
  std::vector<int64_t> lengths;
  for (size_t p = 0; p < prompts.size(); ++p) {
    const auto n = static_cast<int64_t>(prompts[p].size());
    FP8KIT_CHECK(n >= 1, "prefill: prompt {} is empty", p);
    FP8KIT_CHECK(n <= m.options.max_seq,
                 "prefill: prompt {} has {} tokens, more than the KV cache's {} per sequence (raise max_seq)", p, n,
                 m.options.max_seq);
    m.check_tokens(prompts[p], fmt::format("prefill: prompt {}: ", p));
    tokens.insert(tokens.end(), prompts[p].begin(), prompts[p].end());
    lengths.push_back(n);
  }
  return m.prefill(tokens, lengths, first_slot, all_positions);
}

const Tensor& LlamaEngine::decode(std::span<const int32_t> tokens) {
  Impl& m = *impl_;
  const auto batch = static_cast<int64_t>(tokens.size());
  FP8KIT_CHECK(batch >= 1 && batch <= m.options.max_batch, "decode: {} tokens for the engine's {} slots", batch,
               m.options.max_batch);
  m.check_tokens(tokens);
  std::vector<int32_t> positions(tokens.size()), slots(tokens.size()), lengths(tokens.size());
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t length = m.lengths[static_cast<size_t>(b)];
    FP8KIT_CHECK(length >= 1, "decode: slot {} is empty (prefill its prompt first)", b);
    FP8KIT_CHECK(length < m.options.max_seq, "decode: slot {} is full ({} tokens; raise max_seq)", b, length);
    positions[static_cast<size_t>(b)] = static_cast<int32_t>(length);
    slots[static_cast<size_t>(b)] = static_cast<int32_t>(b);
    lengths[static_cast<size_t>(b)] = static_cast<int32_t>(length + 1);
  }
  Impl::DecodeStep& step = m.decode_steps[batch];
  Activations& a = step.buffers;
  if (a.tokens.numel() != batch) {
    a.tokens = Tensor({batch}, DType::I32, m.device());
    a.positions = Tensor({batch}, DType::I32, m.device());
    a.slots = Tensor({batch}, DType::I32, m.device());
    a.lengths = Tensor({batch}, DType::I32, m.device());
  }
  a.tokens.copy_from_host(tokens.data());  // (the last step has finished: decode returns synchronized)
  a.positions.copy_from_host(positions.data());
  a.slots.copy_from_host(slots.data());
  a.lengths.copy_from_host(lengths.data());
  if (!step.graph || step.scratch_generation != m.c.scratch_generation()) {
    step.graph.emplace([&m, &a, batch](ops::Context&) { m.forward(a, batch, batch, 0, false); });
  }
  step.graph->run(m.c);
  m.c.synchronize();
  step.scratch_generation = m.c.scratch_generation();
  for (int64_t b = 0; b < batch; ++b) ++m.lengths[static_cast<size_t>(b)];
  m.after_forward();
  return a.logits;
}

std::vector<int32_t> LlamaEngine::argmax(const Tensor& logits) {
  Tensor ids;
  ops::argmax_rows(impl_->c, logits, ids);
  impl_->c.synchronize();  // host copies do not wait for the context's streams
  const Tensor host = ids.to(Device::Cpu);
  return {host.span<int32_t>().begin(), host.span<int32_t>().end()};
}

int64_t LlamaEngine::slot_length(int64_t slot) const { return impl_->lengths.at(static_cast<size_t>(slot)); }
void LlamaEngine::reset_slots() { std::fill(impl_->lengths.begin(), impl_->lengths.end(), 0); }

void LlamaEngine::assume_cached(int64_t tokens) {
  FP8KIT_CHECK(tokens >= 1 && tokens < impl_->options.max_seq, "assume_cached: {} tokens outside [1, max_seq = {})",
               tokens, impl_->options.max_seq);
  std::fill(impl_->lengths.begin(), impl_->lengths.end(), tokens);
}

void LlamaEngine::record_calibration(quant::CalibrationStats* stats) {
  FP8KIT_CHECK(stats == nullptr || !impl_->fp8_weights(), "calibration runs the bf16 model: load it unpacked");
  impl_->calibration = stats;
}

}  // namespace fp8kit::infer
