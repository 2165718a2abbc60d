// Calibration statistics: percentile, merge, and their safetensors file.
#include "quant/calibration.h"

#include "base/error.h"
#include "io/safetensors.h"
#include "numerics/histogram.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>

namespace fp8kit::quant {
namespace {

constexpr std::string_view kAmaxSuffix = ".channel_amax", kHistogramSuffix = ".histogram";
constexpr std::string_view kVersion = "1";

int64_t parse_count(const io::Metadata& metadata, const std::string& key, const std::string& source) {
  const auto it = metadata.find(key);
  FP8KIT_CHECK(it != metadata.end(), "{} has no \"{}\" in its __metadata__; it is not a complete calibration file",
               source, key);
  int64_t value = -1;
  const std::string& text = it->second;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  FP8KIT_CHECK(error == std::errc() && end == text.data() + text.size() && value >= 0,
               "{}: __metadata__ \"{}\" is \"{}\", not a count", source, key, io::printable(text));
  return value;
}

}  // namespace

float ActivationStats::amax() const {
  float m = 0.0f;
  for (const float a : channel_amax) m = std::max(m, a);
  return m;
}

float ActivationStats::percentile(double fraction) const {
  FP8KIT_CHECK(fraction > 0.0 && fraction <= 1.0, "a percentile fraction must be in (0, 1], not {}", fraction);
  uint64_t total = 0;
  for (const uint64_t count : histogram) total += count;
  if (total == 0) return amax();
  // The first bin whose cumulative count reaches fraction * total (at least one value). The fraction is
  // a decimal (99.9 / 100 is 0.9990000000000001 in binary): a relative 1e-12 keeps 999 of 1000 enough.
  const double target = std::max(1.0, std::ceil(fraction * static_cast<double>(total) * (1.0 - 1e-12)));
  uint64_t cumulative = 0;
  int bin = 0;
  for (; bin < static_cast<int>(histogram.size()); ++bin) {
    cumulative += histogram[bin];
    if (static_cast<double>(cumulative) >= target) break;
  }
  return std::min(histogram_bin_upper(bin), amax());
}

void ActivationStats::merge(const ActivationStats& other) {
  if (channel_amax.empty() && histogram.empty()) {
    *this = other;
    return;
  }
  FP8KIT_CHECK(channel_amax.size() == other.channel_amax.size(),
               "cannot merge activation statistics of {} channels with ones of {}", channel_amax.size(),
               other.channel_amax.size());
  for (size_t i = 0; i < channel_amax.size(); ++i) channel_amax[i] = std::max(channel_amax[i], other.channel_amax[i]);
  if (histogram.empty() || other.histogram.empty()) {
    histogram.clear();
    return;
  }
  for (size_t i = 0; i < histogram.size(); ++i) histogram[i] += other.histogram[i];
}

void CalibrationStats::merge(const CalibrationStats& other) {
  for (const auto& [name, stats] : other.activations) activations[name].merge(stats);
  prompts += other.prompts;
  tokens += other.tokens;
  if (source.empty()) source = other.source;
}

void save_calibration(const std::filesystem::path& path, const CalibrationStats& stats) {
  io::SafetensorsFile file;
  file.metadata = {{"format", kCalibrationFormat},
                   {"version", std::string(kVersion)},
                   {"prompts", std::to_string(stats.prompts)},
                   {"tokens", std::to_string(stats.tokens)},
                   {"source", stats.source}};
  for (const auto& [name, activation] : stats.activations) {
    FP8KIT_CHECK(!activation.channel_amax.empty(), "calibration statistics of \"{}\" have no channels", name);
    FP8KIT_CHECK(activation.histogram.empty() || activation.histogram.size() == static_cast<size_t>(kHistogramBins),
                 "the histogram of \"{}\" has {} bins; it needs {}", name, activation.histogram.size(),
                 kHistogramBins);
    const int64_t channels = static_cast<int64_t>(activation.channel_amax.size());
    file.tensors.push_back(io::f32_tensor(name + std::string(kAmaxSuffix), {channels}, activation.channel_amax));
    if (!activation.histogram.empty()) {
      io::StoredTensor counts{name + std::string(kHistogramSuffix), io::Dtype::U64, {kHistogramBins}, {}};
      const auto bytes = std::as_bytes(std::span(activation.histogram));
      counts.data.assign(bytes.begin(), bytes.end());
      file.tensors.push_back(std::move(counts));
    }
  }
  io::write_safetensors(path, file);
}

CalibrationStats load_calibration(const std::filesystem::path& path) {
  const io::SafetensorsFile file = io::read_safetensors(path);
  const std::string source = path.string();
  const auto format = file.metadata.find("format");
  FP8KIT_CHECK(format != file.metadata.end() && format->second == kCalibrationFormat,
               "{} is not a calibration file (its __metadata__ has no \"format\": \"{}\"); make one with `fp8kit lm "
               "calibrate`",
               source, kCalibrationFormat);
  const auto version = file.metadata.find("version");
  FP8KIT_CHECK(version != file.metadata.end() && version->second == kVersion,
               "{} is calibration format version \"{}\"; this fp8kit reads version {}", source,
               version == file.metadata.end() ? "" : io::printable(version->second), kVersion);
  CalibrationStats stats;
  stats.prompts = parse_count(file.metadata, "prompts", source);
  stats.tokens = parse_count(file.metadata, "tokens", source);
  if (const auto it = file.metadata.find("source"); it != file.metadata.end()) stats.source = it->second;
  // Amaxes first, so that a histogram can be checked against its activation.
  for (const io::StoredTensor& t : file.tensors) {
    const std::string name = io::printable(t.name);
    if (!t.name.ends_with(kAmaxSuffix)) {
      FP8KIT_CHECK(t.name.ends_with(kHistogramSuffix),
                   "{}: tensor \"{}\" is neither an activation's .channel_amax nor its .histogram", source, name);
      continue;
    }
    FP8KIT_CHECK(t.dtype == io::Dtype::F32 && t.shape.size() == 1 && t.shape[0] > 0,
                 "{}: tensor \"{}\" must be F32 of shape [channels], not {} of {} dimensions", source, name,
                 io::dtype_name(t.dtype), t.shape.size());
    ActivationStats activation;
    activation.channel_amax = t.to_f32();
    for (const float a : activation.channel_amax) {
      FP8KIT_CHECK(a >= 0.0f, "{}: tensor \"{}\" holds the amax {}; an amax is >= 0 (the file is corrupt)", source,
                   name, a);
    }
    stats.activations.emplace(t.name.substr(0, t.name.size() - kAmaxSuffix.size()), std::move(activation));
  }
  for (const io::StoredTensor& t : file.tensors) {
    if (!t.name.ends_with(kHistogramSuffix)) continue;
    const std::string name = io::printable(t.name);
    const auto it = stats.activations.find(t.name.substr(0, t.name.size() - kHistogramSuffix.size()));
    FP8KIT_CHECK(it != stats.activations.end(), "{}: tensor \"{}\" is a histogram without its .channel_amax", source,
                 name);
    FP8KIT_CHECK((t.dtype == io::Dtype::U64 || t.dtype == io::Dtype::I64) && t.shape.size() == 1 &&
                     t.shape[0] == kHistogramBins,
                 "{}: tensor \"{}\" must be U64 or I64 of shape [{}]", source, name, kHistogramBins);
    std::vector<uint64_t>& counts = it->second.histogram;
    counts.resize(kHistogramBins);
    std::memcpy(counts.data(), t.data.data(), t.data.size());
    if (t.dtype == io::Dtype::I64) {
      for (const uint64_t count : counts) {
        FP8KIT_CHECK(static_cast<int64_t>(count) >= 0, "{}: tensor \"{}\" holds a negative count", source, name);
      }
    }
  }
  return stats;
}

}  // namespace fp8kit::quant
