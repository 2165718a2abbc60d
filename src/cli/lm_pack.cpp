// `fp8kit lm pack`: a bf16/f32 HF Llama directory to an FP8 one that vLLM and compressed-tensors read,
// with scales from calibration statistics when asked; prints the sizes and what it wrote.
#include "cli/lm_common.h"

#include "base/error.h"
#include "cli/options.h"
#include "models/llama_config.h"
#include "quant/pack.h"

#include <fmt/format.h>

#include <memory>
#include <optional>
#include <string>

namespace fp8kit::cli {
namespace {

namespace fs = std::filesystem;

struct PackArgs {
  std::string model, out, calibration;
  std::string weights = "channel";
  int64_t group = 128;
  std::string activations = "dynamic";
  std::optional<double> percentile;
  int64_t margin = 0;
  std::string kv_cache = "none", kv_scales = "tensor";
  std::string format = "compressed-tensors";
  bool master_copy = false;
  int64_t max_shard_bytes = io::kHfDefaultMaxShardBytes;
};

std::string megabytes(uint64_t bytes) { return fmt::format("{:.2f} MB", static_cast<double>(bytes) / 1e6); }

// Why fp8kit's runtime cannot serve a pack of `model` with these weight scales, or "" when it can:
// its FP8 GEMMs take groups of 128 only, and it fuses q/k/v and gate/up into one GEMM each, so 128x128
// blocks must not straddle two of their parts.
std::string runtime_refusal(const PackArgs& a, const models::LlamaConfig& c) {
  if (a.weights == "group" && a.group != 128)
    return fmt::format("weights in groups of {} (its FP8 GEMMs take groups of 128: pack with --group 128)", a.group);
  const int64_t q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
  if (a.weights == "block" && (q % 128 != 0 || kv % 128 != 0 || c.intermediate_size % 128 != 0))
    return fmt::format("128x128 blocks straddling the parts of its fused q/k/v or gate/up GEMM (q_proj has {} "
                       "rows, k_proj and v_proj {}, gate_proj and up_proj {}: multiples of 128 needed; pack with "
                       "--weights channel or tensor)",
                       q, kv, c.intermediate_size);
  return "";
}

void run_pack(const PackArgs& a) {
  quant::PackOptions options;
  options.weights = a.weights == "tensor"  ? Granularity::PerTensor
                    : a.weights == "group" ? Granularity::PerGroup
                    : a.weights == "block" ? Granularity::Block128x128
                                           : Granularity::PerRow;
  options.group_size = a.group;
  options.static_activations = a.activations == "static";
  options.fp8_kv_cache = a.kv_cache == "fp8";
  options.kv_scales = a.kv_scales == "head" ? quant::KvScaleGranularity::PerHead : quant::KvScaleGranularity::PerTensor;
  options.format = a.format == "vllm" ? quant::PackFormat::Vllm : quant::PackFormat::CompressedTensors;
  options.calibrated.margin = static_cast<int>(a.margin);
  options.calibrated.percentile = a.percentile;
  options.master_copy = a.master_copy;
  options.max_shard_bytes = static_cast<uint64_t>(a.max_shard_bytes);
  FP8KIT_CHECK(!a.calibration.empty() || (!options.static_activations && !options.fp8_kv_cache),
               "{} --calibration FILE (from `fp8kit lm calibrate`)",
               !options.fp8_kv_cache          ? "--activations static needs"
               : !options.static_activations ? "--kv-cache fp8 needs"
                                              : "--activations static and --kv-cache fp8 need");
  FP8KIT_CHECK(!a.percentile || !a.calibration.empty(), "--percentile clips calibrated scales; give --calibration");
  std::optional<quant::CalibrationStats> calibration;
  if (!a.calibration.empty()) calibration = quant::load_calibration(a.calibration);

  const quant::PackReport r = quant::pack_llama(a.model, a.out, options, calibration ? &*calibration : nullptr);
  fmt::print("Packed {} projections of {} to FP8 E4M3 ({} weights, {} activations{}), {}\n", r.quantized, a.model,
             a.weights == "group" ? fmt::format("group {}", a.group) : a.weights, a.activations,
             options.fp8_kv_cache ? fmt::format(", FP8 KV cache scales per {}", a.kv_scales) : "", a.format);
  fmt::print("Projections: {} bf16 -> {} packed ({:.3f}x)\n", megabytes(r.projection_bf16_bytes),
             megabytes(r.projection_packed_bytes), r.projection_ratio());
  fmt::print("Checkpoint:  {} bf16 -> {} packed ({:.3f}x; embeddings, norms and lm_head stay bf16)\n",
             megabytes(r.bf16_bytes), megabytes(r.packed_bytes), r.ratio());
  fmt::print("Wrote:");
  for (const fs::path& file : r.files) fmt::print(" {}", file.lexically_relative(a.out).string());
  fmt::print(" in {}\n", a.out);
  if (const std::string why = runtime_refusal(a, models::read_llama_config(a.model)); !why.empty())
    fmt::print(stderr, "warning: fp8kit's runtime (lm generate, eval, agreement) cannot serve this pack: {}\n", why);
}

}  // namespace

void add_lm_pack_command(CLI::App& lm) {
  auto a = std::make_shared<PackArgs>();
  CLI::App* pack = lm.add_subcommand(
      "pack", "Pack an HF Llama directory to FP8 (E4M3 projections + scales) as vLLM and compressed-tensors read it");
  pack->add_option("--model", a->model, "the bf16 or f32 HF Llama model directory")
      ->required()
      ->check(CLI::ExistingDirectory);
  pack->add_option("--out", a->out, "the packed model's directory (never the source)")->required()->check(non_empty_path());
  pack->add_option("--calibration", a->calibration,
                   "activation statistics from `fp8kit lm calibrate` (their amaxes are exported as amax-history seeds)")
      ->check(CLI::ExistingFile);
  pack->add_option("--weights", a->weights, "weight scales: per tensor, output channel, group (along the input) or 128x128 block")
      ->capture_default_str()
      ->check(CLI::IsMember({"tensor", "channel", "group", "block"}));
  pack->add_option("--group", a->group, "elements per weight group (--weights group)")
      ->capture_default_str()
      ->check(CLI::IsMember({32, 64, 128}));
  pack->add_option("--activations", a->activations, "activation scales: dynamic (per token) or static (calibrated)")
      ->capture_default_str()
      ->check(CLI::IsMember({"dynamic", "static"}));
  pack->add_option("--percentile", a->percentile, "clip calibrated scales at this percentile of |x| (e.g. 99.99)")
      ->check(real_number(50, 100));
  pack->add_option("--margin", a->margin, "calibrated scales get 2^margin headroom")
      ->capture_default_str()
      ->check(whole_number(0, 16));
  pack->add_option("--kv-cache", a->kv_cache, "fp8: write calibrated KV cache scales (k_scale, v_scale)")
      ->capture_default_str()
      ->check(CLI::IsMember({"fp8", "none"}));
  pack->add_option("--kv-scales", a->kv_scales, "KV cache scales per tensor or per KV head")
      ->capture_default_str()
      ->check(CLI::IsMember({"tensor", "head"}));
  pack->add_option("--format", a->format, "config.json's quantization_config: compressed-tensors or vllm (native fp8)")
      ->capture_default_str()
      ->check(CLI::IsMember({"compressed-tensors", "vllm"}));
  pack->add_flag("--master-copy", a->master_copy, "also keep the projections' bf16 weights in OUT/bf16-master/");
  pack->add_option("--max-shard-size", a->max_shard_bytes, "bytes of weights per model.safetensors shard")
      ->capture_default_str()
      ->check(whole_number(1, int64_t{1} << 50));
  pack->callback([a] { run_pack(*a); });
}

}  // namespace fp8kit::cli
