// lm pack's library end to end: a tiny random Llama saved as an HF directory, packed at every weight
// granularity in both config forms, read back with open_packed_model (codes, scales, dequantized
// weights within E4M3's rounding of the originals), its metadata, sidecar and config.json, calibrated
// activation and KV cache scales, the size ratio of the 25m preset, and every bad input refused with a
// one-line message naming the tensor.
#include "quant/pack.h"
#include "quant/packed_model.h"

#include "common/error_of.h"
#include "common/read_text.h"
#include "common/temp_dir.h"
#include "io/safetensors.h"
#include "models/llama_io.h"
#include "numerics/histogram.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <functional>
#include <fstream>

namespace fp8kit::quant {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using testing::error_of;
using testing::read_text;
using ::testing::HasSubstr;

// A random tiny Llama (hidden 64, 2 layers, 4 heads, 2 KV heads of 16, FFN 192) saved in BF16, with a
// tokenizer file beside it.
fs::path make_source(const testing::TempDir& dir, std::string_view preset = "tiny", int64_t vocab = 300,
                     const std::string& name = "source") {
  const fs::path path = dir / name;
  models::Llama model(models::llama_preset(preset, vocab), 7, Device::Cpu);
  models::save_pretrained(model, path);
  std::ofstream(path / "tokenizer.json") << "{\"model\": {}}\n";
  return path;
}

// Statistics of every GEMM input and the KV cache of a tiny model, as the engine records them.
CalibrationStats calibration_for(const models::LlamaConfig& c) {
  CalibrationStats stats;
  stats.prompts = 4;
  stats.tokens = 100;
  stats.source = "test";
  auto stats_of = [](int64_t channels, float amax) {
    ActivationStats s;
    for (int64_t i = 0; i < channels; ++i) s.channel_amax.push_back(amax * static_cast<float>(i + 1) / channels);
    s.histogram.assign(kHistogramBins, 0);
    s.histogram[histogram_bin(amax / 8)] = 999;
    s.histogram[histogram_bin(amax)] = 1;
    return s;
  };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"})
      stats.activations[p + m] = stats_of(c.hidden_size, 8.0f);
    stats.activations[p + "self_attn.o_proj"] = stats_of(c.num_attention_heads * c.head_dim, 4.0f);
    stats.activations[p + "mlp.gate_proj"] = stats.activations[p + "mlp.up_proj"] = stats_of(c.hidden_size, 16.0f);
    stats.activations[p + "mlp.down_proj"] = stats_of(c.intermediate_size, 32.0f);
    stats.activations[p + "self_attn.k_cache"] = stats_of(c.num_key_value_heads * c.head_dim, 12.0f);
    stats.activations[p + "self_attn.v_cache"] = stats_of(c.num_key_value_heads * c.head_dim, 3.0f);
  }
  return stats;
}

// Every dequantized projection is within E4M3's rounding of the source's weight: half a step of 3
// mantissa bits relative, or half the smallest subnormal step times the block's scale.
void expect_round_trip(const fs::path& source, const PackedModel& packed) {
  const io::HfWeights original = io::open_hf_weights(source);
  ASSERT_EQ(packed.linears().size(), 7u * packed.config().num_hidden_layers);
  for (const PackedLinear& linear : packed.linears()) {
    const std::vector<float> x = io::tensor_to_f32(original.at(linear.name + ".weight"));
    const std::vector<float> d = dequantize(linear);
    const std::vector<float> scales = linear.scale_inv();
    const BlockShape block = linear.block();
    const size_t cols = static_cast<size_t>(linear.weight->shape[1]);
    const size_t grid_cols = (cols + block.cols - 1) / block.cols;
    ASSERT_EQ(d.size(), x.size());
    for (size_t i = 0; i < x.size(); ++i) {
      const float s = scales[(i / cols / block.rows) * grid_cols + (i % cols) / block.cols];
      ASSERT_LE(std::fabs(d[i] - x[i]), std::fabs(x[i]) / 16 + s * 0x1p-10f) << linear.name << " element " << i;
    }
  }
}

struct Case {
  Granularity weights;
  int64_t group;
  PackFormat format;
  std::vector<int64_t> q_scale_shape;  // of layer 0's q_proj [64, 64]
  std::vector<int64_t> down_scale_shape;  // of down_proj [64, 192]
  const char* scale_suffix;
};

TEST(Pack, RoundTripsEveryGranularityInBothForms) {
  const testing::TempDir dir("pack");
  const fs::path source = make_source(dir);
  const std::vector<Case> cases = {
      {Granularity::PerTensor, 0, PackFormat::CompressedTensors, {1}, {1}, ".weight_scale"},
      {Granularity::PerTensor, 0, PackFormat::Vllm, {}, {}, ".weight_scale"},
      {Granularity::PerRow, 0, PackFormat::CompressedTensors, {64, 1}, {64, 1}, ".weight_scale"},
      {Granularity::PerGroup, 32, PackFormat::CompressedTensors, {64, 2}, {64, 6}, ".weight_scale"},
      {Granularity::PerGroup, 128, PackFormat::CompressedTensors, {64, 1}, {64, 2}, ".weight_scale"},
      {Granularity::Block128x128, 0, PackFormat::CompressedTensors, {1, 1}, {1, 2}, ".weight_scale"},
      {Granularity::Block128x128, 0, PackFormat::Vllm, {1, 1}, {1, 2}, ".weight_scale_inv"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string(name(c.weights)) + (c.format == PackFormat::Vllm ? " vllm" : " ct"));
    const fs::path out = dir / "packed";
    PackOptions options{.weights = c.weights, .format = c.format};
    if (c.group) options.group_size = c.group;
    const PackReport report = pack_llama(source, out, options);
    EXPECT_EQ(report.quantized, 14);
    const PackedModel packed = open_packed_model(out);
    EXPECT_EQ(packed.quantization().weights, c.weights);
    EXPECT_EQ(packed.quantization().activations, ActivationScheme::Dynamic);
    EXPECT_FALSE(packed.quantization().fp8_kv_cache);
    const PackedLinear& q = packed.linear("model.layers.0.self_attn.q_proj");
    EXPECT_EQ(q.weight->dtype, io::Dtype::F8_E4M3);
    EXPECT_EQ(q.weight->shape, (std::vector<int64_t>{64, 64}));
    EXPECT_EQ(q.scale->name, "model.layers.0.self_attn.q_proj" + std::string(c.scale_suffix));
    EXPECT_EQ(q.scale->dtype, io::Dtype::F32);
    EXPECT_EQ(q.scale->shape, c.q_scale_shape);
    EXPECT_EQ(packed.linear("model.layers.1.mlp.down_proj").scale->shape, c.down_scale_shape);
    EXPECT_FALSE(q.input_scale.has_value());
    EXPECT_EQ(packed.k_scale(1), std::vector<float>(2, 1.0f));  // none written: vLLM's default
    // The codes are numerics' quantization of the source's values.
    const std::vector<float> x = io::tensor_to_f32(io::open_hf_weights(source).at(q.name + ".weight"));
    const QuantizedTensor expected = quantize(x, 64, 64, Fp8Format::E4M3, c.weights, c.group ? c.group : 64);
    EXPECT_TRUE(std::equal(expected.data.begin(), expected.data.end(),
                           reinterpret_cast<const uint8_t*>(q.weight->data.data())));
    EXPECT_EQ(q.scale_inv(), expected.scale_inv);
    expect_round_trip(source, packed);
    // Dense tensors stay BF16.
    EXPECT_EQ(packed.weights().at("model.embed_tokens.weight").dtype, io::Dtype::BF16);
    EXPECT_EQ(packed.weights().at("model.norm.weight").dtype, io::Dtype::BF16);
    EXPECT_EQ(packed.weights().find("lm_head.weight"), nullptr);  // tied
    EXPECT_EQ(read_text(out / "tokenizer.json"), read_text(source / "tokenizer.json"));
  }
}

TEST(Pack, WritesTheQuantizationConfigMetadataAndSidecar) {
  const testing::TempDir dir("pack_meta");
  const fs::path source = make_source(dir);
  const models::LlamaConfig config = models::read_llama_config(source);
  const CalibrationStats calibration = calibration_for(config);
  PackOptions options{.weights = Granularity::PerGroup, .group_size = 64, .static_activations = true,
                      .fp8_kv_cache = true, .kv_scales = KvScaleGranularity::PerHead};
  options.calibrated.percentile = 99.9;
  const fs::path out = dir / "packed";
  pack_llama(source, out, options, &calibration);

  const json c = json::parse(read_text(out / "config.json"));
  const json source_config = json::parse(read_text(source / "config.json"));
  EXPECT_EQ(c["hidden_size"], source_config["hidden_size"]);
  const json& q = c["quantization_config"];
  EXPECT_EQ(q["quant_method"], "compressed-tensors");
  EXPECT_EQ(q["format"], "float-quantized");
  EXPECT_EQ(q["ignore"], json::array({"lm_head"}));
  const json& group = q["config_groups"]["group_0"];
  EXPECT_EQ(group["targets"], json::array({"Linear"}));
  EXPECT_EQ(group["weights"]["strategy"], "group");
  EXPECT_EQ(group["weights"]["group_size"], 64);
  EXPECT_EQ(group["weights"]["type"], "float");
  EXPECT_EQ(group["weights"]["num_bits"], 8);
  EXPECT_EQ(group["input_activations"]["strategy"], "tensor");
  EXPECT_EQ(group["input_activations"]["dynamic"], false);
  EXPECT_EQ(q["kv_cache_scheme"]["strategy"], "attn_head");

  const PackedModel packed = open_packed_model(out);
  EXPECT_EQ(packed.quantization().activations, ActivationScheme::Static);
  EXPECT_TRUE(packed.quantization().fp8_kv_cache);
  EXPECT_EQ(packed.quantization().group_size, 64);
  // q_proj's input: amax 8 but 99.9% of the values below 1 (bin of 8/8): clipped at that bin's top.
  const float clip = histogram_bin_upper(histogram_bin(1.0f));
  EXPECT_FLOAT_EQ(*packed.linear("model.layers.1.self_attn.q_proj").input_scale, clip / 448);
  EXPECT_FLOAT_EQ(*packed.linear("model.layers.0.mlp.down_proj").input_scale, histogram_bin_upper(histogram_bin(4.0f)) / 448);
  // Per KV head: head 0 holds channels 0..15 of 32 (amax 12 * 16/32 = 6), capped at the tensor's clip.
  const float k_clip = histogram_bin_upper(histogram_bin(1.5f));
  EXPECT_EQ(packed.weights().at("model.layers.0.self_attn.k_scale").shape, std::vector<int64_t>{2});
  EXPECT_THAT(packed.k_scale(0), ::testing::ElementsAre(std::min(6.0f, k_clip) / 448, std::min(12.0f, k_clip) / 448));

  // The seed's metadata, per tensor, in the file holding it and in the sidecar.
  const io::SafetensorsFile file = io::read_safetensors(out / "model.safetensors");
  EXPECT_EQ(file.metadata.at("format"), "pt");
  EXPECT_EQ(file.metadata.at("fp8kit.format"), "fp8kit-fp8-pack");
  const json entry = json::parse(file.metadata.at("model.layers.0.mlp.up_proj.weight"));
  EXPECT_EQ(entry["format"], "E4M3");
  EXPECT_EQ(entry["layout"], "row-major [out, in]");
  EXPECT_EQ(entry["granularity"], "group");
  EXPECT_EQ(entry["group_size"], 64);
  EXPECT_EQ(entry["scale_inv"], "model.layers.0.mlp.up_proj.weight_scale");
  EXPECT_EQ(entry["input"]["scale_inv"], "model.layers.0.mlp.up_proj.input_scale");
  EXPECT_FLOAT_EQ(entry["input"]["amax_history_seed"].get<float>(), histogram_bin_upper(histogram_bin(2.0f)));
  const std::vector<float> up = io::tensor_to_f32(io::open_hf_weights(source).at("model.layers.0.mlp.up_proj.weight"));
  float amax = 0;
  for (const float v : up) amax = std::max(amax, std::fabs(v));
  EXPECT_EQ(entry["amax_history_seed"].get<float>(), amax);
  const json sidecar = json::parse(read_text(out / kPackSidecarFile));
  EXPECT_EQ(sidecar["format"], "fp8kit-fp8-pack");
  EXPECT_EQ(sidecar["tensors"]["model.layers.0.mlp.up_proj.weight"], entry);
  EXPECT_EQ(sidecar["tensors"]["model.layers.1.self_attn.v_scale"]["granularity"], "head");
  EXPECT_EQ(sidecar["calibration"]["tokens"], 100);
  EXPECT_EQ(sidecar["quantization_config"], q);
}

TEST(Pack, VllmFormWithStaticScalesAndAMasterCopy) {
  const testing::TempDir dir("pack_vllm");
  const fs::path source = make_source(dir);
  const CalibrationStats calibration = calibration_for(models::read_llama_config(source));
  const PackOptions options{.weights = Granularity::PerTensor, .static_activations = true, .fp8_kv_cache = true,
                            .format = PackFormat::Vllm, .master_copy = true};
  const fs::path out = dir / "packed";
  const PackReport report = pack_llama(source, out, options, &calibration);
  const json q = json::parse(read_text(out / "config.json"))["quantization_config"];
  EXPECT_EQ(q, json::parse(R"({"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "static",
                               "ignored_layers": ["lm_head"]})"));
  const PackedModel packed = open_packed_model(out);
  EXPECT_EQ(packed.quantization().method, "fp8");
  EXPECT_EQ(packed.weights().at("model.layers.0.self_attn.o_proj.input_scale").shape, std::vector<int64_t>{});
  EXPECT_EQ(packed.weights().at("model.layers.0.self_attn.k_scale").shape, std::vector<int64_t>{});
  EXPECT_THAT(packed.v_scale(1), ::testing::ElementsAre(3.0f / 448, 3.0f / 448));
  EXPECT_TRUE(packed.quantization().fp8_kv_cache);
  // The master copy: the projections' BF16 weights, bit for bit the source's.
  const io::HfWeights master = io::open_hf_weights(out / kMasterCopyDir);
  const io::HfWeights original = io::open_hf_weights(source);
  EXPECT_EQ(master.size(), 14u);
  const io::TensorView& a = master.at("model.layers.1.mlp.gate_proj.weight");
  const io::TensorView& b = original.at("model.layers.1.mlp.gate_proj.weight");
  EXPECT_TRUE(std::ranges::equal(a.data, b.data));
  EXPECT_EQ(report.files.back(), out / "config.json");
}

TEST(Pack, The25mPresetsProjectionsPackToAtMostHalfPlusTheirScales) {
  const testing::TempDir dir("pack_size");
  const fs::path source = make_source(dir, "25m", 8192);
  for (const Granularity g : {Granularity::PerTensor, Granularity::PerRow, Granularity::PerGroup, Granularity::Block128x128}) {
    const PackReport report = pack_llama(source, dir / "packed", {.weights = g, .group_size = 128});
    SCOPED_TRACE(name(g));
    EXPECT_LE(report.projection_ratio(), 0.52);
    EXPECT_GE(report.projection_ratio(), 0.5);
    // The embedding (tied, 8192 x 512) stays BF16: 17% of the weights.
    EXPECT_LE(report.ratio(), 0.6);
    uint64_t on_disk = 0;
    for (const auto& entry : fs::directory_iterator(dir / "packed"))
      if (entry.path().extension() == ".safetensors") on_disk += fs::file_size(entry.path());
    EXPECT_NEAR(static_cast<double>(on_disk), static_cast<double>(report.packed_bytes), 200'000.0);
  }
}

TEST(Pack, RefusesWhatItCannotPack) {
  const testing::TempDir dir("pack_errors");
  const fs::path source = make_source(dir);
  EXPECT_THAT(error_of([&] { pack_llama(source, source, {}); }), HasSubstr("is the source model's directory"));
  EXPECT_THAT(error_of([&] { pack_llama(source, dir / "x", {.weights = Granularity::PerRow, .format = PackFormat::Vllm}); }),
              HasSubstr("per-tensor or 128x128 block weight scales only"));
  EXPECT_THAT(error_of([&] { pack_llama(source, dir / "x", {.static_activations = true}); }),
              HasSubstr("give a calibration file"));
  EXPECT_THAT(error_of([&] { pack_llama(source, dir / "x", {.weights = Granularity::PerGroup, .group_size = 16}); }),
              HasSubstr("32, 64 or 128"));
  CalibrationStats partial = calibration_for(models::read_llama_config(source));
  partial.activations.erase("model.layers.1.mlp.down_proj");
  EXPECT_EQ(error_of([&] { pack_llama(source, dir / "x", {.static_activations = true}, &partial); }),
            "the calibration statistics have no \"model.layers.1.mlp.down_proj\"; calibrate the same model again");
  EXPECT_FALSE(fs::exists(dir / "x" / "config.json"));
  const fs::path other = make_source(dir, "tiny", 400, "other");  // an unquantized model
  EXPECT_THAT(error_of([&] { pack_llama(source, other, {}); }), HasSubstr("not a packed one"));
  pack_llama(source, dir / "packed", {});
  EXPECT_THAT(error_of([&] { pack_llama(dir / "packed", dir / "again", {}); }), HasSubstr("is already quantized"));
}

// A packed directory with model.safetensors edited by `edit`, and config.json by `edit_config`.
struct Broken {
  testing::TempDir dir{"packed_bad"};
  fs::path out;
  io::SafetensorsFile file;

  Broken() {
    const fs::path source = make_source(dir);
    out = dir / "packed";
    const CalibrationStats calibration = calibration_for(models::read_llama_config(source));
    pack_llama(source, out, {.weights = Granularity::PerRow, .static_activations = true, .fp8_kv_cache = true},
               &calibration);
    file = io::read_safetensors(out / "model.safetensors");
  }
  io::StoredTensor& tensor(std::string_view name) {
    for (auto& t : file.tensors)
      if (t.name == name) return t;
    throw std::runtime_error("no tensor " + std::string(name));
  }
  std::string error_after(const std::function<void(io::SafetensorsFile&)>& edit) {
    io::SafetensorsFile edited = file;
    edit(edited);
    io::write_safetensors(out / "model.safetensors", edited);
    return error_of([&] { open_packed_model(out); });
  }
};

TEST(PackedModel, RefusesBadFilesNamingTheTensor) {
  Broken b;
  const std::string file = (b.out / "model.safetensors").string(), dir = b.out.string();
  const std::string q = "model.layers.0.self_attn.q_proj";
  EXPECT_EQ(b.error_after([&](auto& f) { std::erase_if(f.tensors, [&](auto& t) { return t.name == q + ".weight_scale"; }); }),
            q + ".weight_scale is missing from " + dir + "; a packed projection needs its scale");
  EXPECT_EQ(b.error_after([&](auto& f) {
              for (auto& t : f.tensors)
                if (t.name == q + ".weight") t = {t.name, io::Dtype::BF16, {64, 64}, std::vector<std::byte>(64 * 64 * 2)};
            }),
            q + ".weight in " + file + " is BF16; a packed projection is F8_E4M3 (or F8_E5M2)");
  EXPECT_EQ(b.error_after([&](auto& f) {
              for (auto& t : f.tensors)
                if (t.name == q + ".weight") t.shape = {32, 128};
            }),
            q + ".weight in " + file + " has shape [32, 128] but the model needs [64, 64]");
  EXPECT_EQ(b.error_after([&](auto& f) {
              for (auto& t : f.tensors)
                if (t.name == q + ".weight_scale") t.shape = {1, 64};
            }),
            q + ".weight_scale in " + file +
                " has shape [1, 64] but the scales of the [64, 64] weight " + q + ".weight are [64, 1] (per output channel)");
  EXPECT_EQ(b.error_after([&](auto& f) {
              for (auto& t : f.tensors)
                if (t.name == q + ".weight_scale") {
                  const float nan = NAN;
                  std::memcpy(t.data.data() + 12, &nan, 4);
                }
            }),
            q + ".weight_scale in " + file + " holds nan at index 3; a scale must be finite and > 0");
  EXPECT_EQ(b.error_after([&](auto& f) {
              for (auto& t : f.tensors)
                if (t.name == q + ".input_scale") t = io::f32_tensor(t.name, {1}, std::vector<float>{0.0f});
            }),
            q + ".input_scale in " + file + " holds 0 at index 0; a scale must be finite and > 0");
  EXPECT_EQ(b.error_after([&](auto& f) { std::erase_if(f.tensors, [&](auto& t) { return t.name == q + ".input_scale"; }); }),
            q + ".input_scale is missing from " + dir + "; static activations need one per projection");
  EXPECT_EQ(b.error_after([&](auto& f) {
              for (auto& t : f.tensors)
                if (t.name == "model.layers.1.self_attn.v_scale") t = io::f32_tensor(t.name, {3}, std::vector<float>{1, 1, 1});
            }),
            "model.layers.1.self_attn.v_scale in " + file +
                " has shape [3]; a KV cache scale is [], [1] or one per KV head [2]");
  // A shape that does not match the config: the config says FFN 256, the file holds 192.
  b.error_after([](auto&) {});
  json config = json::parse(read_text(b.out / "config.json"));
  config["intermediate_size"] = 256;
  std::ofstream(b.out / "config.json") << config.dump();
  EXPECT_EQ(error_of([&] { open_packed_model(b.out); }),
            "model.layers.0.mlp.gate_proj.weight in " + file + " has shape [192, 64] but the model needs [256, 64]");
}

TEST(PackedModel, RefusesATruncatedFile) {
  Broken b;
  const fs::path path = b.out / "model.safetensors";
  fs::resize_file(path, fs::file_size(path) - 100);
  const std::string error = error_of([&] { open_packed_model(b.out); });
  EXPECT_THAT(error, ::testing::StartsWith(path.string() + ": tensor \""));  // the last tensor, by name
  EXPECT_THAT(error, HasSubstr("run past the end of the data"));
  EXPECT_THAT(error, ::testing::Not(HasSubstr("\n")));
}

TEST(PackedModel, DecodesE5m2Codes) {
  Broken b;
  const std::string v = "model.layers.0.self_attn.v_proj";
  b.error_after([&](io::SafetensorsFile& f) {
    for (auto& t : f.tensors) {
      if (t.name == v + ".weight") {
        t.dtype = io::Dtype::F8_E5M2;
        std::ranges::fill(t.data, std::byte{0x3C});  // E5M2 1.0 (E4M3 would read 1.5)
      }
    }
  });
  const PackedModel packed = open_packed_model(b.out);
  const PackedLinear& linear = packed.linear(v);
  EXPECT_EQ(linear.format(), Fp8Format::E5M2);
  const std::vector<float> scales = linear.scale_inv(), d = dequantize(linear);
  EXPECT_EQ(d[0], scales[0]);
  EXPECT_EQ(d[31 * 64 + 5], scales[31]);
}

TEST(PackedModel, ReadsLlmCompressorsSpellings) {
  // llm-compressor writes scales in the model's dtype (BF16), per-channel [out, 1], and older versions
  // the KV scales as k_proj.output_scale; an ignored projection stays BF16.
  Broken b;
  const std::string q = "model.layers.0.self_attn.q_proj";
  const io::TensorView original_scale{"s", io::Dtype::F32, b.tensor(q + ".weight_scale").shape,
                                      b.tensor(q + ".weight_scale").data};
  const std::vector<float> scales = io::tensor_to_f32(original_scale);
  b.error_after([&](io::SafetensorsFile& f) {
    for (auto& t : f.tensors) {
      if (t.name.ends_with(".weight_scale")) {
        const std::vector<uint16_t> bits = io::f32_to_bf16(t.to_f32());
        const auto bytes = std::as_bytes(std::span(bits));
        t = {t.name, io::Dtype::BF16, t.shape, {bytes.begin(), bytes.end()}};
      }
      if (t.name == "model.layers.1.self_attn.k_scale") t.name = "model.layers.1.self_attn.k_proj.output_scale";
      if (t.name == "model.layers.1.mlp.down_proj.weight") {
        std::vector<float> dense(t.data.size(), 0.5f);
        const std::vector<uint16_t> bits = io::f32_to_bf16(dense);
        const auto bytes = std::as_bytes(std::span(bits));
        t = {t.name, io::Dtype::BF16, t.shape, {bytes.begin(), bytes.end()}};
      }
    }
    std::erase_if(f.tensors, [](auto& t) { return t.name.starts_with("model.layers.1.mlp.down_proj.") && !t.name.ends_with(".weight"); });
  });
  json config = json::parse(read_text(b.out / "config.json"));
  config["quantization_config"]["ignore"] = {"lm_head", "re:.*layers[.]1[.]mlp[.]down_proj$"};
  std::ofstream(b.out / "config.json") << config.dump();
  const PackedModel packed = open_packed_model(b.out);
  const PackedLinear& linear = packed.linear(q);
  EXPECT_EQ(linear.scale->dtype, io::Dtype::BF16);
  const std::vector<float> read = linear.scale_inv();
  for (size_t i = 0; i < scales.size(); ++i) EXPECT_NEAR(read[i], scales[i], scales[i] / 128) << i;
  EXPECT_FALSE(packed.linear("model.layers.1.mlp.down_proj").fp8());
  EXPECT_EQ(dequantize(packed.linear("model.layers.1.mlp.down_proj"))[5], 0.5f);
  EXPECT_EQ(packed.k_scale(1).size(), 2u);
  EXPECT_NE(packed.k_scale(1)[0], 1.0f);
  EXPECT_THAT(error_of([&] { packed.linear("model.layers.9.mlp.up_proj"); }), HasSubstr("no projection"));
}

}  // namespace
}  // namespace fp8kit::quant
