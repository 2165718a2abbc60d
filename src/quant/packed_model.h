// Reading a packed FP8 Llama directory back, whoever wrote it (fp8kit's `lm pack`, llm-compressor's
// compressed-tensors "float-quantized" files, vLLM's native "fp8" ones, and the other spellings of
// spec/checkpoints.md): the config, the quantization scheme, each projection's codes and scales as
// views of the mapped files, static input scales and KV cache scales, all validated on open.
#pragma once

#include "io/hf_model.h"
#include "models/llama_config.h"
#include "numerics/quantized_tensor.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace fp8kit::quant {

enum class ActivationScheme {
  None,     // weight-only FP8 (compressed-tensors without input_activations): bf16 activations
  Dynamic,  // a scale per token (or per group of 128 tokens' elements for block weights), computed at run time
  Static,   // one calibrated input_scale per projection
};

struct PackedQuantization {
  std::string method;  // "compressed-tensors" or "fp8" (vLLM's native format)
  ActivationScheme activations = ActivationScheme::Dynamic;
  Granularity weights = Granularity::PerTensor;  // PerTensor, PerRow, PerGroup or Block128x128
  int64_t group_size = 0;                        // PerGroup
  std::vector<std::string> ignore;               // modules kept dense (names, or "re:" patterns)
  bool fp8_kv_cache = false;                     // kv_cache_scheme given, or k/v scales present
};

// One projection ("model.layers.0.self_attn.q_proj"): its weight [out, in] as FP8 codes (F8_E4M3 or
// F8_E5M2) with its scale (weight_scale, or weight_scale_inv for blocks; F32, BF16 or F16: a
// dequantization multiplier per block of block()), or, for a module the config ignores, a dense weight
// (BF16, F32 or F16) and no scale.
struct PackedLinear {
  std::string name;
  const io::TensorView* weight = nullptr;
  const io::TensorView* scale = nullptr;  // null: dense
  Granularity granularity = Granularity::PerTensor;
  int64_t group = 0;                 // PerGroup: elements per group along `in`; Block128x128: 128
  std::optional<float> input_scale;  // static activations: the input's dequantization multiplier

  bool fp8() const { return scale != nullptr; }
  Fp8Format format() const;  // of the codes
  BlockShape block() const;  // the [rows, cols] tile one scale covers
  // The scales as floats, [ceil(out / block rows), ceil(in / block cols)] row-major.
  std::vector<float> scale_inv() const;
};

class PackedModel {
 public:
  const models::LlamaConfig& config() const { return config_; }
  const PackedQuantization& quantization() const { return quantization_; }
  // By module name; throws naming it when the model has no such projection.
  const PackedLinear& linear(std::string_view name) const;
  const std::vector<PackedLinear>& linears() const { return linears_; }  // HF order, layer by layer
  // The KV cache's dequantization multipliers of `layer`, one per KV head (a per-tensor scale repeated);
  // 1.0 when the checkpoint has none (vLLM's default).
  std::vector<float> k_scale(int64_t layer) const;
  std::vector<float> v_scale(int64_t layer) const;
  // Every tensor, the dense ones (embeddings, norms, lm_head: BF16, F32 or F16) included.
  const io::HfWeights& weights() const { return weights_; }

 private:
  friend PackedModel open_packed_model(const std::filesystem::path& dir);
  models::LlamaConfig config_;
  PackedQuantization quantization_;
  io::HfWeights weights_;
  std::vector<PackedLinear> linears_;
  std::map<std::string, size_t, std::less<>> by_name_;
  std::vector<std::vector<float>> k_scales_, v_scales_;
};

// Opens and validates `dir`: config.json's Llama config and quantization_config (either form), every
// projection present as FP8 [out, in] per the config (dense where ignored), its scale present with a
// shape its granularity allows (per tensor [] or [1]; per channel [out, 1] or [out]; per group [out,
// ceil(in / g)]; blocks [ceil(out / 128), ceil(in / 128)]), static input_scale [] or [1], k_scale /
// v_scale [], [1], [kv_heads] or [kv_heads, 1, 1] (also under the older name k_proj.output_scale), every
// scale finite and > 0, and the dense weights with their shapes. Errors are one line naming the tensor.
PackedModel open_packed_model(const std::filesystem::path& dir);

// The projection's weight as floats [out, in]: each code times its block's scale (numerics'
// dequantize_blocks), or the dense weight widened.
std::vector<float> dequantize(const PackedLinear& linear);

}  // namespace fp8kit::quant
