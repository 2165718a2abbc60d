// The lab's simulated FP8 (clip, then round(x * 2^m) / 2^m) next to real FP8 rounding: the simulation's
// grid is fixed, real FP8's step grows with the exponent, so the two agree only in [1, 2).
#include "lab/fp8_error.h"
#include "lab/lab.h"
#include "lab/page.h"
#include "numerics/cast.h"
#include "numerics/convert.h"
#include "numerics/scale.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

namespace fp8kit::lab {
namespace {

using report::Tone;

// How far the simulation's error is from the real one: "agrees" within 2x, else which way and how much.
std::string verdict(double real, double simulated, Tone& tone) {
  if (simulated <= 2 * real && real <= 2 * simulated) {
    tone = Tone::Good;
    return "agrees";
  }
  tone = Tone::Bad;
  if (real == 0) return "simulation has error, real FP8 is exact";
  if (simulated == 0) return "simulation exact, real FP8 is not";
  return simulated > real ? fmt::format("simulation {:.3g}x too pessimistic", simulated / real)
                          : fmt::format("simulation {:.3g}x too optimistic", real / simulated);
}

// The lab's quantize_tensor_fp8 helper: scale = amax / fp8_max, then the fixed grid, dequantized.
double lab_helper_mean_error(const std::vector<float>& x, Fp8Format f) {
  const float scale = std::max(amax(x) / fp8_max(f), 1e-10f);
  double error = 0;
  for (float v : x) error += std::fabs(static_cast<double>(lab_model(v / scale, f) * scale) - v);
  return error / static_cast<double>(x.size());
}

}  // namespace

void simulated_fp8_part(report::HtmlPage& page, const LabOptions& options) {
  page.heading("Simulated FP8 against real FP8");
  page.paragraph(
      "The lab simulates FP8 as round(clip(x) * 2^m) / 2^m, with m the mantissa bits: a fixed grid of 1/8 (E4M3) "
      "or 1/4 (E5M2) from 0 to the format's max. Real FP8 has m mantissa bits at every exponent: its step is "
      "2^-m relative to the value, 1/8 only in [1, 2), 32 near E4M3's max, 2^-9 near its smallest values. The "
      "simulation ignores the exponent, so it is too pessimistic below 1 (tiny values round to 0) and far too "
      "optimistic above 2 (it keeps 1/8 steps where FP8 has steps of 32). Parts 3 and 4 of the lab and its "
      "quantize_tensor_fp8 helper use it; this page uses the real casts everywhere.");

  constexpr int per_decade = 400, per_bin = per_decade / 10;
  const MagnitudeSweep sweep = magnitude_sweep(-3.0f, 6.0f, 6 * per_decade + 1);
  report::LinePlot plot{.title = "Relative error by magnitude: real FP8 and the lab's simulation (no scaling)",
                        .x = {.label = "value magnitude", .log = true},
                        .y = {.label = "worst |q(v) - v| / v per 1/10 decade", .log = true, .min = 1e-5, .max = 2.0}};
  const char* labels[] = {"e4m3 (real)", "e5m2 (real)", "e4m3, lab's simulation", "e5m2, lab's simulation"};
  const char* colors[] = {"#1f77b4", "#ff7f0e", "#1f77b4", "#ff7f0e"};
  for (int k = 0; k < 4; ++k) {
    report::PlotSeries series{.label = labels[k], .dashed = k >= 2, .color = colors[k]};
    worst_per_bin(sweep, k < 2 ? sweep.real[k] : sweep.lab[k - 2], per_bin, series.x, series.y);
    plot.series.push_back(std::move(series));
  }
  page.plot(plot, "The simulation's error falls as 1/v (a fixed absolute step) until it clips at the max; real "
                  "FP8's relative error is flat over the normal range and grows only among subnormals.");
  std::vector<report::CsvRow> sweep_rows;
  for (size_t i = 0; i < sweep.magnitude.size(); i += per_bin / 4) {
    sweep_rows.push_back({num(sweep.magnitude[i]), num(sweep.real[0][i]), num(sweep.real[1][i]), num(sweep.lab[0][i]),
                          num(sweep.lab[1][i])});
  }
  csv_link(page, options, "simulated_fp8_relative_error.csv",
           {"magnitude", "e4m3", "e5m2", "lab_simulation_e4m3", "lab_simulation_e5m2"}, sweep_rows);

  // Decade by decade, up to the format's max (beyond it both clip alike): the worst error of each, and
  // whether the simulation is right there.
  std::vector<report::CsvRow> decade_rows;
  std::vector<Tone> decade_tones;
  for (int d = -3; d < 3; ++d) {
    for (int k = 0; k < 2; ++k) {
      double real = 0, simulated = 0;
      for (size_t i = 0; i < sweep.magnitude.size(); ++i) {
        if (sweep.magnitude[i] < std::pow(10.0, d) || sweep.magnitude[i] >= std::pow(10.0, d + 1) ||
            sweep.magnitude[i] > fp8_max(kFormats[k])) {
          continue;
        }
        real = std::max(real, sweep.real[k][i]), simulated = std::max(simulated, sweep.lab[k][i]);
      }
      Tone tone;
      const std::string v = verdict(real, simulated, tone);
      decade_rows.push_back({fmt::format("[1e{}, 1e{})", d, d + 1), std::string(name(kFormats[k])), percent(real),
                             percent(simulated), v});
      decade_tones.push_back(tone);
    }
  }
  csv_table(page, options, "simulated_fp8_by_decade.csv",
            {"magnitude", "format", "real worst relative error", "simulated worst relative error", "simulation is"},
            decade_rows,
            "Where the simulation is wrong, decade by decade up to the format's max (red: off by more than 2x)",
            decade_tones);

  const float values[] = {0.001f, 0.04f, 0.3f, 1.3f, 3.3f, 17.3f, 100.3f, 300.0f, 1000.0f};
  std::vector<report::CsvRow> value_rows;
  std::vector<Tone> value_tones;
  for (float v : values) {
    for (int k = 0; k < 2; ++k) {
      const Fp8Format f = kFormats[k];
      const float real = decode_fp8(encode_fp8(v, f), f), simulated = lab_model(v, f);
      value_rows.push_back({num(v), std::string(name(f)), num(real), num(simulated), real == simulated ? "yes" : "no"});
      value_tones.push_back(real == simulated ? Tone::Good : Tone::Bad);
    }
  }
  csv_table(page, options, "simulated_fp8_values.csv",
            {"value", "format", "real FP8 value", "simulated value", "same"}, value_rows,
            "Single values through both (saturating casts, no scale)", value_tones);

  // The lab's quantize_tensor_fp8 demo: randn(1000) * 5 with the scale amax / fp8_max.
  Normal normal(options.seed);
  const std::vector<float> demo = normal_tensor(normal, 1000, 5.0f);
  std::vector<report::CsvRow> demo_rows;
  double real_error[2], simulated_error[2];
  for (int k = 0; k < 2; ++k) {
    const Fp8Format f = kFormats[k];
    real_error[k] = quantization_error(demo, f, current_scale(amax(demo), f)).mean_abs;
    simulated_error[k] = lab_helper_mean_error(demo, f);
    demo_rows.push_back({std::string(name(f)), num(real_error[k]), num(simulated_error[k]),
                         fmt::format("{:.3g}", real_error[k] / simulated_error[k])});
  }
  csv_table(page, options, "simulated_fp8_lab_helper.csv",
            {"format", "real mean |error|", "simulated mean |error|", "real / simulated"}, demo_rows,
            "The lab's quantize_tensor_fp8 demo (randn(1000) * 5, scale amax / fp8_max)");
  page.callout(fmt::format("Scaled to fill the format, values sit where the simulation's fixed grid is far finer "
                           "than FP8's real steps: it understates E4M3's error {:.3g}x and E5M2's {:.3g}x (E5M2's "
                           "values reach 57344 on a grid of 1/4). With its own simulation the lab's demo finds "
                           "E5M2's error {:.3g}x E4M3's, so its printed \"E4M3 error is ...x lower\" contradicts "
                           "itself; with real casts E5M2's error is {:.3g}x E4M3's, as the formats' mantissa bits "
                           "say.",
                           real_error[0] / simulated_error[0], real_error[1] / simulated_error[1],
                           simulated_error[1] / simulated_error[0], real_error[1] / real_error[0]),
               Tone::Warn);
}

}  // namespace fp8kit::lab
