// `fp8kit lm pack` end to end on a tiny random Llama: the packed directory, the sizes it prints, a
// calibration file's static and KV cache scales, and one-line errors for what a user gets wrong.
#include "cli/run_cli.h"
#include "common/temp_dir.h"
#include "models/llama_io.h"
#include "quant/calibration.h"
#include "quant/packed_model.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

namespace fp8kit::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::StartsWith;

fs::path tiny_model(const TempDir& dir) {
  models::Llama model(models::llama_preset("tiny", 300), 3, Device::Cpu);
  models::save_pretrained(model, dir / "model");
  return dir / "model";
}

TEST(LmPackCli, PacksAndReportsSizes) {
  const TempDir dir("lm_pack_cli");
  const std::string model = tiny_model(dir).string(), out = (dir / "packed").string();
  CliResult r = run_cli("lm pack --model " + model + " --out " + out + " --weights block");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("Packed 14 projections"));
  EXPECT_THAT(r.output, HasSubstr("Projections: 0.20 MB bf16 -> 0.10 MB packed (0.500x)"));
  EXPECT_THAT(r.output, HasSubstr("Checkpoint:"));
  EXPECT_THAT(r.output, HasSubstr("model.safetensors fp8kit_quantization.json config.json"));
  // The tiny model's 64-row parts straddle 128x128 blocks of the runtime's fused GEMMs.
  EXPECT_THAT(r.output, HasSubstr("warning: fp8kit's runtime (lm generate, eval, agreement) cannot serve this pack: "
                                  "128x128 blocks straddling"));
  EXPECT_EQ(quant::open_packed_model(out).quantization().weights, Granularity::Block128x128);

  quant::CalibrationStats stats;
  const models::LlamaConfig c = models::read_llama_config(model);
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "mlp.gate_proj", "mlp.up_proj"})
      stats.activations[p + m] = {std::vector<float>(64, 4.48f), {}};
    stats.activations[p + "self_attn.o_proj"] = {std::vector<float>(64, 44.8f), {}};
    stats.activations[p + "mlp.down_proj"] = {std::vector<float>(192, 8.96f), {}};
    stats.activations[p + "self_attn.k_cache"] = stats.activations[p + "self_attn.v_cache"] = {std::vector<float>(32, 2.24f), {}};
  }
  const std::string calibration = (dir / "calibration.safetensors").string();
  quant::save_calibration(calibration, stats);
  r = run_cli("lm pack --model " + model + " --out " + out + " --calibration " + calibration +
              " --weights tensor --activations static --kv-cache fp8 --kv-scales head --format vllm --margin 1");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("static activations, FP8 KV cache scales per head), vllm"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("warning")));
  const quant::PackedModel packed = quant::open_packed_model(out);
  EXPECT_FLOAT_EQ(*packed.linear("model.layers.1.self_attn.o_proj").input_scale, 0.2f);  // 44.8 / 448 * 2
  EXPECT_FLOAT_EQ(packed.k_scale(0)[1], 0.01f);
}

TEST(LmPackCli, RefusesWhatItCannotDo) {
  const TempDir dir("lm_pack_cli_errors");
  const std::string model = tiny_model(dir).string(), out = (dir / "packed").string();
  auto error = [&](const std::string& args) {
    const CliResult r = run_cli("lm pack --model " + model + " " + args);
    EXPECT_NE(r.exit_code, 0) << args;
    EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;
    return r.output;
  };
  EXPECT_THAT(error("--out " + out + " --weights rows"), StartsWith("error: --weights: rows not in {tensor,channel,group,block}"));
  EXPECT_THAT(error("--out " + out + " --weights group --group 48"), HasSubstr("--group"));
  EXPECT_THAT(error("--out " + out + " --activations static"), StartsWith("error: --activations static needs --calibration"));
  EXPECT_THAT(error("--out " + out + " --kv-cache fp8"), StartsWith("error: --kv-cache fp8 needs --calibration"));
  EXPECT_THAT(error("--out " + out + " --format vllm"), HasSubstr("per-tensor or 128x128 block weight scales only"));
  EXPECT_THAT(error("--out " + model), HasSubstr("is the source model's directory"));
  EXPECT_THAT(error("--out " + out + " --percentile 99.9"), HasSubstr("give --calibration"));
  EXPECT_FALSE(fs::exists(dir / "packed" / "config.json"));
}

}  // namespace
}  // namespace fp8kit::testing
