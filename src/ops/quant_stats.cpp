// Quantization statistics: argument checks, the CPU reference (numerics' scalar casts, element by
// element in order), the dispatch to the GPU kernel (ops/cuda/quant_stats.h) and the record's reading.
#include "ops/quant_stats.h"

#include "base/error.h"
#include "numerics/cast.h"
#include "ops/tensor_checks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/context.h"
#include "ops/cuda/quant_stats.h"
#endif

namespace fp8kit::ops {

namespace cpu {

QuantStatsRecord quant_stats(std::span<const float> x, const QuantStatsSpec& spec) {
  QuantStatsRecord r{};
  const FormatInfo& fi = info(spec.format);
  const float s = *spec.scale;
  // The dequantization as the GEMM means it, in double: code / scale (keras lag: code * multiplier).
  const double dequant = spec.divide ? static_cast<double>(s) : 1.0 / static_cast<double>(s);
  r.count = x.size();
  r.scale = spec.divide ? 1.0f / s : s;
  for (const float v : x) {
    if (!std::isfinite(v)) {
      ++r.nonfinite;
      if (std::isinf(v)) r.amax = std::numeric_limits<float>::infinity();
      continue;
    }
    r.amax = std::max(r.amax, std::fabs(v));
    const float scaled = spec.divide ? v / s : v * s;
    r.saturated += std::fabs(scaled) > fi.max_finite;
    const float code = decode_fp8(encode_fp8(scaled, spec.format), spec.format);
    r.flushed += v != 0.0f && code == 0.0f;
    r.subnormal += code != 0.0f && std::fabs(code) < fi.min_normal;
    const double e = static_cast<double>(v) - static_cast<double>(code) * dequant;
    r.sum_squares += static_cast<double>(v) * static_cast<double>(v);
    r.error_squares += e * e;
  }
  for (int64_t i = 0; spec.history != nullptr && i < spec.history_length; ++i)
    r.history_amax = std::max(r.history_amax, spec.history[i]);
  return r;
}

}  // namespace cpu

void quant_stats(Context& c, const Tensor& x, const QuantStatsSpec& spec, Tensor& record, Tensor& partials) {
  constexpr std::string_view op = "quant_stats";
  check_tensor(c, x, x.shape(), DType::F32, op, "x");
  check_tensor(c, record, {kQuantStatsWords}, DType::I32, op, "the record");
  check_tensor(c, partials, {kQuantStatsParts * kQuantStatsWords}, DType::I32, op, "the partial records");
  FP8KIT_CHECK(spec.scale != nullptr, "quant_stats: the cast's scale is missing");
  FP8KIT_CHECK(spec.history == nullptr || spec.history_length > 0, "quant_stats: an amax history needs its length");
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    cuda::quant_stats(x.device_data<float>(), x.numel(), spec, {}, record.device_data<int32_t>(),
                      partials.device_data<int32_t>(), stream(c));
#endif
    return;
  }
  const QuantStatsRecord r = cpu::quant_stats(x.span<float>(), spec);
  std::memcpy(record.data<int32_t>(), &r, sizeof(r));
}

QuantStats decode_quant_stats(std::span<const int32_t> words) {
  FP8KIT_CHECK(static_cast<int64_t>(words.size()) >= kQuantStatsWords, "a quantization record needs {} words, got {}",
               kQuantStatsWords, words.size());
  QuantStats s;
  std::memcpy(&s.raw, words.data(), sizeof(s.raw));
  return s;
}

namespace {
double fraction(uint64_t n, uint64_t count) {
  return count == 0 ? 0.0 : static_cast<double>(n) / static_cast<double>(count);
}
}  // namespace

double QuantStats::saturated_fraction() const { return fraction(raw.saturated, raw.count); }
double QuantStats::flushed_fraction() const { return fraction(raw.flushed, raw.count); }
double QuantStats::subnormal_fraction() const { return fraction(raw.subnormal, raw.count); }
double QuantStats::underflow_fraction() const { return fraction(raw.flushed + raw.subnormal, raw.count); }
double QuantStats::nonfinite_fraction() const { return fraction(raw.nonfinite, raw.count); }

std::optional<double> QuantStats::snr_db() const {
  if (!(raw.sum_squares > 0)) return std::nullopt;
  if (raw.error_squares == 0) return std::numeric_limits<double>::infinity();
  return 10.0 * std::log10(raw.sum_squares / raw.error_squares);
}

}  // namespace fp8kit::ops
