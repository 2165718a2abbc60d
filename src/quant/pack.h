// Packing a bf16/f32 Hugging Face Llama directory into an FP8 one that vLLM and compressed-tensors read
// unchanged (spec/checkpoints.md): the seven projections of every block as E4M3 codes [out, in] with
// their scales, static activation scales and KV cache scales from calibration when asked, everything
// else (embeddings, norms, lm_head) in BF16, config.json's quantization_config, and the pipeline seed's
// per-tensor metadata in each file's __metadata__ and in a JSON sidecar.
#pragma once

#include "io/hf_model.h"
#include "numerics/quantized_tensor.h"
#include "quant/calibration.h"
#include "quant/scales.h"

#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace fp8kit::quant {

// config.json's quantization_config: compressed-tensors' "float-quantized" form (llm-compressor's
// output), or vLLM's native "fp8" method (per-tensor or 128x128 block weight scales only).
enum class PackFormat { CompressedTensors, Vllm };
enum class KvScaleGranularity { PerTensor, PerHead };

struct PackOptions {
  // Weight scales: PerTensor, PerRow (per output channel), PerGroup (group_size along the input dim)
  // or Block128x128. A weight's scale always fits its own amax (no margin, no percentile).
  Granularity weights = Granularity::PerRow;
  int64_t group_size = 128;  // PerGroup: 32, 64 or 128
  // Activations: static (input_scale per projection from the calibration) or dynamic (per token; per
  // group of 128 for block weights, which take dynamic activations only).
  bool static_activations = false;
  // FP8 KV cache: self_attn.k_scale / v_scale from the calibration's k_cache / v_cache statistics.
  bool fp8_kv_cache = false;
  KvScaleGranularity kv_scales = KvScaleGranularity::PerTensor;
  PackFormat format = PackFormat::CompressedTensors;
  ScalePolicy calibrated{};  // margin and percentile of the activation and KV cache scales
  // Also write the projections' unquantized weights (BF16, HF names) into OUT/bf16-master/ (an HF
  // weights directory: model.safetensors or shards), for re-deriving scales later; the rest of the bf16
  // model is in OUT itself.
  bool master_copy = false;
  uint64_t max_shard_bytes = io::kHfDefaultMaxShardBytes;
};

struct PackReport {
  uint64_t bf16_bytes = 0;    // the checkpoint's weights at 2 bytes per element (as a bf16 save holds them)
  uint64_t packed_bytes = 0;  // the packed checkpoint's tensor bytes (the master copy not counted)
  uint64_t projection_bf16_bytes = 0, projection_packed_bytes = 0;  // the FP8 projections alone, scales included
  int64_t quantized = 0;                                          // projections packed
  std::vector<std::filesystem::path> files;                        // everything written, in order
  double ratio() const { return static_cast<double>(packed_bytes) / static_cast<double>(bf16_bytes); }
  double projection_ratio() const {
    return static_cast<double>(projection_packed_bytes) / static_cast<double>(projection_bf16_bytes);
  }
};

inline constexpr std::string_view kPackSidecarFile = "fp8kit_quantization.json";
inline constexpr std::string_view kMasterCopyDir = "bf16-master";
inline constexpr std::string_view kPackedFormat = "fp8kit-fp8-pack";  // the sidecar's and metadata's format tag

// True for the weights the seed's policy packs to FP8: the q/k/v/o and gate/up/down projections of the
// blocks ("model.layers.N.self_attn.q_proj.weight", ...).
bool is_fp8_projection(std::string_view weight_name);

// Packs `model_dir` (config.json and weights; F32, BF16 or F16) into `out_dir` (created; refused when
// it is the source or holds an unquantized model): the weight files as io::write_hf_model_weights
// writes them (atomic, sharded at max_shard_bytes), the sidecar, the tokenizer files present
// (tokenizer.json, tokenizer_config.json, special_tokens_map.json, generation_config.json), the master
// copy when asked, and config.json last (an earlier config.json is removed first, so a directory with
// one is complete). `calibration` is required for static activations and the FP8 KV cache (a missing
// statistic is an error naming it); when given, the inputs' calibrated amaxes are exported as
// amax-history seeds even for dynamic activations.
PackReport pack_llama(const std::filesystem::path& model_dir, const std::filesystem::path& out_dir,
                      const PackOptions& options, const CalibrationStats* calibration = nullptr);

}  // namespace fp8kit::quant
