// Calibration statistics: amax, percentile from the histogram, merge, the file's round trip and
// every malformed file refused with a message naming the file and the tensor; the scales derived.
#include "quant/calibration.h"
#include "quant/scales.h"

#include "common/error_of.h"
#include "common/temp_dir.h"
#include "io/safetensors.h"
#include "numerics/histogram.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

namespace fp8kit::quant {
namespace {

using testing::error_of;
using ::testing::HasSubstr;

ActivationStats stats_of(std::vector<float> values, bool histogram) {
  ActivationStats s;
  s.channel_amax.assign(1, 0.0f);
  if (histogram) s.histogram.assign(kHistogramBins, 0);
  for (const float v : values) {
    s.channel_amax[0] = std::max(s.channel_amax[0], std::fabs(v));
    if (histogram) ++s.histogram[histogram_bin(std::fabs(v))];
  }
  return s;
}

TEST(Calibration, PercentileIsTheUpperEdgeOfTheBinThatReachesTheFraction) {
  std::vector<float> values(999, 1.0f);
  values.push_back(100.0f);  // one outlier in 1000
  const ActivationStats s = stats_of(values, true);
  EXPECT_EQ(s.amax(), 100.0f);
  EXPECT_EQ(s.percentile(0.999), histogram_bin_upper(histogram_bin(1.0f)));
  EXPECT_EQ(s.percentile(0.999), 1.0f + 1.0f / 16);  // 16 bins per octave
  EXPECT_EQ(s.percentile(99.9 / 100), 1.0f + 1.0f / 16);  // 0.9990000000000001: still 999 of 1000
  EXPECT_EQ(s.percentile(1.0), 100.0f);              // capped at the amax, not the bin's edge
  EXPECT_EQ(stats_of(values, false).percentile(0.999), 100.0f);  // no histogram: the amax
  EXPECT_THAT(error_of([&] { s.percentile(0.0); }), HasSubstr("(0, 1]"));
}

TEST(Calibration, MergeTakesChannelMaximaAndAddsCounts) {
  ActivationStats a{{1.0f, 5.0f}, std::vector<uint64_t>(kHistogramBins, 1)};
  const ActivationStats b{{3.0f, 2.0f}, std::vector<uint64_t>(kHistogramBins, 2)};
  a.merge(b);
  EXPECT_EQ(a.channel_amax, (std::vector<float>{3.0f, 5.0f}));
  EXPECT_EQ(a.histogram, std::vector<uint64_t>(kHistogramBins, 3));
  a.merge(ActivationStats{{0.0f, 9.0f}, {}});  // one without a histogram: the tail is unknown now
  EXPECT_EQ(a.channel_amax, (std::vector<float>{3.0f, 9.0f}));
  EXPECT_TRUE(a.histogram.empty());
  ActivationStats empty;
  empty.merge(b);
  EXPECT_EQ(empty.channel_amax, b.channel_amax);
  EXPECT_THAT(error_of([&] { a.merge(ActivationStats{{1.0f}, {}}); }), HasSubstr("2 channels with ones of 1"));

  CalibrationStats x{{{"p", b}}, 2, 10, "run"}, y{{{"p", b}, {"q", b}}, 1, 5, ""};
  x.merge(y);
  EXPECT_EQ(x.prompts, 3);
  EXPECT_EQ(x.tokens, 15);
  EXPECT_EQ(x.activations.size(), 2u);
  EXPECT_EQ(x.activations["p"].histogram[0], 4u);
}

CalibrationStats sample() {
  CalibrationStats s;
  s.activations["model.layers.0.self_attn.q_proj"] = {{0.5f, 2.0f, 1.0f}, std::vector<uint64_t>(kHistogramBins, 7)};
  s.activations["model.layers.0.mlp.down_proj"] = {{4.0f, 0.0f}, {}};
  s.prompts = 12;
  s.tokens = 3456;
  s.source = "model x, prompts.txt";
  return s;
}

TEST(Calibration, SavesAndLoadsExactly) {
  const testing::TempDir dir("calibration");
  const CalibrationStats s = sample();
  save_calibration(dir / "calib.safetensors", s);
  const CalibrationStats back = load_calibration(dir / "calib.safetensors");
  EXPECT_EQ(back.prompts, 12);
  EXPECT_EQ(back.tokens, 3456);
  EXPECT_EQ(back.source, s.source);
  ASSERT_EQ(back.activations.size(), 2u);
  for (const auto& [name, a] : s.activations) {
    EXPECT_EQ(back.activations.at(name).channel_amax, a.channel_amax) << name;
    EXPECT_EQ(back.activations.at(name).histogram, a.histogram) << name;
  }
  const io::SafetensorsFile file = io::read_safetensors(dir / "calib.safetensors");
  EXPECT_EQ(file.metadata.at("format"), "fp8kit-calibration");
  EXPECT_EQ(file.metadata.at("version"), "1");
  EXPECT_EQ(file.find("model.layers.0.self_attn.q_proj.histogram")->dtype, io::Dtype::U64);
  EXPECT_EQ(file.find("model.layers.0.mlp.down_proj.histogram"), nullptr);
}

TEST(Calibration, RefusesMalformedFiles) {
  const testing::TempDir dir("calibration_bad");
  const auto path = dir / "calib.safetensors";
  save_calibration(path, sample());
  const io::SafetensorsFile good = io::read_safetensors(path);
  auto edited = [&](auto&& edit) {
    io::SafetensorsFile file = good;
    edit(file);
    io::write_safetensors(path, file);
    return error_of([&] { load_calibration(path); });
  };
  auto tensor = [](io::SafetensorsFile& f, std::string_view name) -> io::StoredTensor& {
    for (auto& t : f.tensors)
      if (t.name == name) return t;
    throw std::runtime_error("no tensor");
  };
  const std::string amax = "model.layers.0.self_attn.q_proj.channel_amax";
  EXPECT_EQ(edited([&](auto& f) {
              tensor(f, amax) = io::f32_tensor(amax, {3}, std::vector<float>{1.0f, std::nanf(""), 2.0f});
            }),
            path.string() + ": tensor \"" + amax + "\" holds the amax nan; an amax is >= 0 (the file is corrupt)");
  EXPECT_THAT(edited([&](auto& f) { tensor(f, amax) = io::f32_tensor(amax, {1}, std::vector<float>{-1.0f}); }),
              HasSubstr("holds the amax -1"));
  EXPECT_THAT(edited([&](auto& f) { tensor(f, amax).dtype = io::Dtype::I32; }),
              HasSubstr("\"" + amax + "\" must be F32 of shape [channels]"));
  EXPECT_THAT(edited([&](auto& f) { f.metadata["format"] = "pt"; }), HasSubstr("is not a calibration file"));
  EXPECT_THAT(edited([&](auto& f) { f.metadata["version"] = "9"; }), HasSubstr("version \"9\""));
  EXPECT_THAT(edited([&](auto& f) { f.metadata["tokens"] = "-3"; }), HasSubstr("\"tokens\" is \"-3\", not a count"));
  EXPECT_THAT(edited([&](auto& f) { f.tensors.push_back(io::f32_tensor("stray", {1}, std::vector<float>{1})); }),
              HasSubstr("tensor \"stray\" is neither"));
  const std::string histogram = "model.layers.0.self_attn.q_proj.histogram";
  EXPECT_THAT(edited([&](auto& f) {
                tensor(f, histogram).shape = {kHistogramBins / 2, 2};
              }),
              HasSubstr("\"" + histogram + "\" must be U64 or I64 of shape [1024]"));
  EXPECT_THAT(edited([&](auto& f) {
                io::StoredTensor& t = tensor(f, histogram);
                t.dtype = io::Dtype::I64;
                t.data[7] = std::byte{0x80};  // the first count's sign bit
              }),
              HasSubstr("holds a negative count"));
  EXPECT_THAT(edited([&](auto& f) { std::erase_if(f.tensors, [&](auto& t) { return t.name == amax; }); }),
              HasSubstr("\"" + histogram + "\" is a histogram without its .channel_amax"));
}

TEST(Scales, AreAmaxOverTheFormatsMaximumWithMargin) {
  EXPECT_EQ(scale_inv_from_amax(448.0f, Fp8Format::E4M3), 1.0f);
  EXPECT_EQ(scale_inv_from_amax(896.0f, Fp8Format::E4M3), 2.0f);
  EXPECT_EQ(scale_inv_from_amax(57344.0f, Fp8Format::E5M2), 1.0f);
  EXPECT_EQ(scale_inv_from_amax(448.0f, Fp8Format::E4M3, 2), 4.0f);
  EXPECT_FLOAT_EQ(scale_inv_from_amax(3.0f, Fp8Format::E4M3), 3.0f / 448.0f);
  EXPECT_EQ(scale_inv_from_amax(0.0f, Fp8Format::E4M3), 1.0f);  // never seen non-zero
  EXPECT_EQ(scale_inv_from_amax(std::numeric_limits<float>::infinity(), Fp8Format::E4M3), 1.0f);

  std::vector<float> values(9999, 1.0f);
  values.push_back(448.0f);
  const ActivationStats s = stats_of(values, true);
  EXPECT_EQ(calibrated_scale_inv(s, {}), 1.0f);
  EXPECT_FLOAT_EQ(calibrated_scale_inv(s, {.percentile = 99.9}), (1.0f + 1.0f / 16) / 448.0f);
  EXPECT_EQ(calibrated_scale_inv(s, {.percentile = 100.0}), 1.0f);

  const ActivationStats heads{{1.0f, 448.0f, 4.48f, 0.0f}, {}};
  EXPECT_THAT(calibrated_head_amax(heads, 2, {}), ::testing::ElementsAre(448.0f, 4.48f));
  EXPECT_THAT(error_of([&] { calibrated_head_amax(heads, 3, {}); }), HasSubstr("heads of 3 channels"));
}

}  // namespace
}  // namespace fp8kit::quant
