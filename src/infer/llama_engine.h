// The Llama architecture served for inference, on the CPU (the exact reference) or a CUDA GPU: bf16
// activations end to end, the q/k/v and gate/up projections fused into one GEMM each, a KV cache of a
// sequence per slot (bf16, or E4M3 with per-tensor or per-KV-head scales), batched prefill (prompts of
// different lengths in one forward) and decode.
// Weights come from a bf16 HF directory (the baseline), a packed FP8 directory (quant/packed_model.h:
// E4M3 codes copied as they are, never dequantized), or random values made on the device (benchmarks).
// FP8 projections multiply E4M3 activations, quantized by the op that makes them (the norm, SwiGLU,
// a decode step's attention at a static scale; else a quantize of the attention output) with a static
// calibrated scale, a dynamic scale per token, or scales frozen after a warm-up (Transformer Engine's
// habit), and write bf16. The embedding, norms, rotary phases, softmax and LM head stay bf16 (the
// pipeline seed's policy).
#pragma once

#include "models/llama_config.h"
#include "numerics/quantized_tensor.h"
#include "ops/context.h"
#include "ops/kv_cache.h"
#include "quant/calibration.h"
#include "tensor/tensor.h"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <vector>

namespace fp8kit::quant {
class PackedModel;
}

namespace fp8kit::infer {

// How FP8 projections scale their activations.
enum class ActivationScaling {
  Static,   // the packed model's input_scale (calibrated); a model without them is refused
  Dynamic,  // a scale per token, from its own amax
  WarmUp,   // per token for the first warm_up_passes forwards while recording each input's amax, then
            // frozen per-tensor static scales (amax / 448)
};

struct EngineOptions {
  int64_t max_batch = 1;       // KV cache slots: sequences decoded together
  int64_t max_seq = 0;         // tokens per slot (prompt + generated); 0: the config's max_position_embeddings
  DType kv_cache = DType::Bf16;  // Bf16 or E4M3
  // E4M3 KV cache without calibrated k_scale/v_scale (a bf16 model, or a pack without them): this
  // scale for every head (vLLM's default is 1.0).
  float default_kv_scale = 1.0f;
  // FP8 weights: Static when the packed model has input scales, else Dynamic.
  std::optional<ActivationScaling> activations{};
  int warm_up_passes = 8;
};

// Random weights for benchmarks: what random() makes.
struct RandomWeights {
  bool fp8 = false;                                   // the seven projections in E4M3, else bf16
  Granularity granularity = Granularity::PerTensor;   // PerTensor or PerRow (per output channel)
};

// Whether `dir`'s config.json carries a quantization_config (a packed FP8 model).
bool is_packed(const std::filesystem::path& dir);

class LlamaEngine {
 public:
  // A bf16 model from an HF directory (F32, BF16 or F16 weights, rounded to bf16).
  static LlamaEngine from_hf(const std::filesystem::path& dir, Device device, const EngineOptions& options = {});
  // A model directory: packed FP8 (quant/packed_model.h) when its config.json has a quantization_config,
  // else bf16.
  static LlamaEngine open(const std::filesystem::path& dir, Device device, const EngineOptions& options = {});
  // A packed FP8 model (per-tensor or per-channel weight scales; 128x128 blocks with dynamic 1x128
  // activations), its bf16 parts as they are.
  static LlamaEngine from_packed(const quant::PackedModel& model, Device device, const EngineOptions& options = {});
  // Weights drawn on the device from normal(0, 0.02) (norms 1), for speed measurements.
  static LlamaEngine random(const models::LlamaConfig& config, const RandomWeights& weights, uint64_t seed,
                            Device device, const EngineOptions& options = {});
  ~LlamaEngine();
  LlamaEngine(LlamaEngine&&) noexcept;
  LlamaEngine& operator=(LlamaEngine&&) noexcept;

  const models::LlamaConfig& config() const;
  const EngineOptions& options() const;
  ops::Context& context();
  bool fp8_weights() const;
  // Whether an E4M3 KV cache holds some layer's keys or values at EngineOptions::default_kv_scale, the
  // model having no calibrated k_scale/v_scale there.
  bool default_kv_scales() const;
  // Device bytes of the weights and of the KV cache.
  int64_t weight_bytes() const;
  int64_t kv_cache_bytes() const;

  // Prompts of equal length into slots [first_slot, first_slot + batch), each from position 0:
  // tokens [batch * seq] (host, ids checked). Returns the logits [batch, vocab] f32 of each sequence's
  // last token, or with all_positions [batch * seq, vocab] (for perplexity), on the engine's device,
  // computed (the engine's context is synchronized on return, as for decode).
  const Tensor& prefill(std::span<const int32_t> tokens, int64_t batch, int64_t seq, int64_t first_slot = 0,
                        bool all_positions = false);
  // Prompts of any lengths (each non-empty, at most max_seq; host ids, checked) into slots
  // [first_slot, first_slot + prompts.size()), in one forward on their packed tokens (no padding but
  // in the attention, each prompt attending to itself only). Returns the logits [prompts, vocab] f32
  // of each prompt's last token, or with all_positions those of every token, [total tokens, vocab],
  // prompt after prompt. The logits are those of prefilling each prompt alone (on the CPU, the bits).
  const Tensor& prefill(std::span<const std::vector<int32_t>> prompts, int64_t first_slot = 0,
                        bool all_positions = false);
  // One token for each of the slots [0, batch), appended after the tokens each already holds. tokens:
  // [batch] host ids. Returns the logits [batch, vocab] f32. On the GPU every batch size's step is one
  // CUDA graph, captured at its second use.
  const Tensor& decode(std::span<const int32_t> tokens);
  // Greedy ids of the rows of `logits` (the device's argmax), on the host.
  std::vector<int32_t> argmax(const Tensor& logits);
  // Tokens a slot holds; reset_slots empties them all.
  int64_t slot_length(int64_t slot) const;
  void reset_slots();
  // Every slot holds `tokens` tokens whose keys and values are whatever the cache holds: for decode
  // benchmarks at long contexts without paying for their prefill.
  void assume_cached(int64_t tokens);

  // Calibration: while set, every prefill adds the statistics of each projection's input (per channel,
  // with the magnitude histogram) and of every layer's keys and values to `stats` (names as
  // quant/calibration.h says). A bf16 engine only. Null stops recording.
  void record_calibration(quant::CalibrationStats* stats);

 private:
  struct Impl;
  explicit LlamaEngine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace fp8kit::infer
