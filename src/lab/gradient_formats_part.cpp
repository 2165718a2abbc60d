// Exercise 2 of the lab: E4M3 against E5M2 on the same gradients, first the lab's randn * 10, then
// gradient-like tensors whose magnitudes spread over more and more decades, each with a per-tensor scale.
#include "lab/fp8_error.h"
#include "lab/lab.h"
#include "lab/page.h"
#include "numerics/convert.h"
#include "numerics/scale.h"

#include <fmt/format.h>

#include <cmath>
#include <string>
#include <vector>

namespace fp8kit::lab {
namespace {

using report::Tone;

// Log-normal magnitudes around 1e-6 (the size of real gradients) with random signs: |g| = 1e-6 e^(sigma z).
// The middle 99% of them spans 2 * 2.576 * sigma / ln 10 decades.
std::vector<float> gradients(Normal& normal, size_t n, float sigma) {
  std::vector<float> g(n);
  for (float& v : g) v = (normal.uniform() < 0.5 ? -1e-6f : 1e-6f) * std::exp(sigma * normal());
  return g;
}

double decades_spanned(double sigma) { return 2 * 2.5758 * sigma / std::log(10.0); }

}  // namespace

void gradient_formats_part(report::HtmlPage& page, const LabOptions& options) {
  page.heading("Exercise 2: E4M3 against E5M2 for gradients");
  Normal normal(options.seed);
  const std::vector<float> lab = normal_tensor(normal, 10000, 10.0f);
  page.paragraph(
      "The lab's gradients, randn(10000) * 10, quantized with each format: cast as they are (scale 1) and with a "
      "per-tensor scale (fp8_max / amax, as the lab's quantize_tensor_fp8 and Transformer Engine's current "
      "scaling). Element relative error is the mean over values of |error| / |value|, a flushed value counting "
      "100%; SNR is 10 log10(sum x^2 / sum error^2).");
  const float lab_amax = amax(lab);
  std::vector<report::CsvRow> rows;
  double lab_snr[2] = {0, 0};
  for (const bool scaled : {false, true}) {
    for (int k = 0; k < 2; ++k) {
      const Fp8Format f = kFormats[k];
      const float scale = scaled ? current_scale(lab_amax, f) : 1.0f;
      const ErrorStats s = quantization_error(lab, f, scale);
      if (scaled) lab_snr[k] = s.snr_db;
      rows.push_back({std::string(name(f)), scaled ? "per-tensor" : "none", num(scale), num(s.mean_abs),
                      num(s.max_abs), percent(s.element_relative), fmt::format("{:.2f}", s.snr_db),
                      num(s.flushed_pct), num(s.saturated_pct)});
    }
  }
  csv_table(page, options, "exercise2_lab_gradients.csv",
            {"format", "scaling", "scale", "mean |error|", "max |error|", "element relative error", "SNR dB",
             "flushed %", "saturated %"},
            rows, "randn(10000) * 10 (the lab's exercise 2 tensor)");
  page.callout(fmt::format("On the lab's tensor E4M3 wins: {:.1f} dB SNR against E5M2's {:.1f} dB with a scale. "
                           "A normal tensor's values sit within a few decades of its amax, well inside E4M3's "
                           "range, so E4M3's extra mantissa bit decides.",
                           lab_snr[0], lab_snr[1]),
               Tone::Info);

  page.heading("Gradients with a wide dynamic range", 3);
  page.paragraph(
      "Real gradients are not one normal distribution: their magnitudes spread over many decades. Here each "
      "tensor has 65536 log-normal magnitudes around 1e-6, spread wider and wider, each quantized with its own "
      "per-tensor scale (amax to the format's max). What decides now is how far below the amax a format still "
      "has values: E4M3 reaches 2^-9 / 448, 5.4 decades; E5M2 reaches 2^-16 / 57344, 9.6 decades.");
  const float sigmas[] = {0.5f, 1.0f, 1.5f, 2.0f, 2.5f, 3.0f, 3.5f, 4.0f, 5.0f};
  std::vector<report::CsvRow> spread_rows;
  std::vector<Tone> tones;
  report::PlotSeries element[2], flushed[2];
  double crossover = -1;
  for (const float sigma : sigmas) {
    const std::vector<float> g = gradients(normal, 1 << 16, sigma);
    const float a = amax(g);
    ErrorStats s[2];
    for (int k = 0; k < 2; ++k) {
      s[k] = quantization_error(g, kFormats[k], current_scale(a, kFormats[k]));
      element[k].x.push_back(decades_spanned(sigma)), element[k].y.push_back(s[k].element_relative);
      flushed[k].x.push_back(decades_spanned(sigma)), flushed[k].y.push_back(s[k].flushed_pct);
    }
    const bool e5m2_better = s[1].element_relative < s[0].element_relative;
    if (e5m2_better && crossover < 0) crossover = decades_spanned(sigma);
    tones.push_back(e5m2_better ? Tone::Good : Tone::Info);
    spread_rows.push_back({num(sigma), fmt::format("{:.1f}", decades_spanned(sigma)), percent(s[0].element_relative),
                           percent(s[1].element_relative), fmt::format("{:.2f}", s[0].snr_db),
                           fmt::format("{:.2f}", s[1].snr_db), num(s[0].flushed_pct), num(s[1].flushed_pct)});
  }
  csv_table(page, options, "exercise2_dynamic_range.csv",
            {"sigma", "decades (middle 99%)", "e4m3 element error", "e5m2 element error", "e4m3 SNR dB",
             "e5m2 SNR dB", "e4m3 flushed %", "e5m2 flushed %"},
            spread_rows, "Log-normal gradients, per-tensor scale (rows where E5M2 has the lower error in green)",
            tones);
  for (int k = 0; k < 2; ++k) {
    element[k].label = flushed[k].label = std::string(name(kFormats[k]));
  }
  page.plot({.title = "Element relative error against the gradients' dynamic range",
             .x = {.label = "decades spanned by the middle 99% of |g|"},
             .y = {.label = "mean |error| / |g| (flushed = 100%)", .log = true},
             .series = {element[0], element[1]}});
  page.plot({.title = "Values flushed to zero",
             .x = {.label = "decades spanned by the middle 99% of |g|"},
             .y = {.label = "flushed %"},
             .series = {flushed[0], flushed[1]}});
  const std::string where =
      crossover < 0 ? std::string("E4M3 kept the lower element error at every spread measured here")
                    : fmt::format("from about {:.1f} decades of spread on, E5M2 has the lower element error, because "
                                  "E4M3 flushes the small gradients to zero",
                                  crossover);
  page.callout(
      "Which is better for gradients? On a narrow tensor like the lab's, E4M3 has the lower error. But " + where +
          ", while SNR (dominated by the largest values) still favours E4M3. A flushed gradient is an update that "
          "never happens, and gradients' magnitudes both spread wide within a tensor and move fast between steps "
          "(the delayed scale is a step stale): E5M2's range is why the HYBRID recipe uses it for gradients and "
          "E4M3 for the forward pass.",
      Tone::Good);
}

}  // namespace fp8kit::lab
