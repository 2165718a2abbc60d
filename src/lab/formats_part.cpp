// Part 1 of the lab: the formats table, the representable values near 1, and precision by magnitude
// (relative step between neighbouring values of E4M3, E5M2 and bf16, found with the real casts).
#include "lab/formats_table.h"
#include "lab/lab.h"
#include "lab/page.h"
#include "numerics/cast.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

namespace fp8kit::lab {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// The gap from the largest value <= v to the next one, over v; NaN past the largest finite value.
double fp8_relative_step(float v, Fp8Format f) {
  uint8_t c = encode_fp8(v, f);
  if (decode_fp8(c, f) > v) --c;
  if (c >= info(f).max_code) return kNaN;
  return (decode_fp8(static_cast<uint8_t>(c + 1), f) - decode_fp8(c, f)) / v;
}

double bf16_relative_step(float v) {
  uint16_t h = float_to_bf16(v);
  if (bf16_to_float(h) > v) --h;
  return (bf16_to_float(static_cast<uint16_t>(h + 1)) - bf16_to_float(h)) / v;
}

// What a cast does to v, and the relative step there, for the table of typical magnitudes.
std::string step_cell(float v, Fp8Format f) {
  if (v > fp8_max(f)) return fmt::format("over max: saturates to {}", fp8_max(f));
  const float q = decode_fp8(encode_fp8(v, f), f);
  if (q == 0.0f) return "flushed to 0";
  if (v == fp8_max(f)) {
    const uint8_t below = info(f).max_code - 1;
    return fmt::format("the max (step below it {})", percent((v - decode_fp8(below, f)) / v));
  }
  return fmt::format("step {} (cast gives {:g})", percent(fp8_relative_step(v, f)), q);
}

std::string values_in_one_two(Fp8Format f) {
  std::string list;
  for (int c = 0; c <= 0x7F; ++c) {
    const float v = decode_fp8(static_cast<uint8_t>(c), f);
    if (v >= 1.0f && v < 2.0f) list += (list.empty() ? "" : ", ") + fmt::format("{:g}", v);
  }
  return list;
}

}  // namespace

void formats_part(report::HtmlPage& page, const LabOptions& options) {
  page.heading("Part 1: Understanding FP8 formats");
  page.paragraph(
      "FP8 comes in two OCP formats: E4M3 (4 exponent bits, 3 mantissa bits) for weights and activations, "
      "where precision matters, and E5M2 (5 exponent, 2 mantissa) for gradients, where range matters. Every "
      "number on this page comes from fp8kit's bit-exact casts (numerics/cast.h), the same bytes the GPU's "
      "quantize kernels write.");
  const FormatsTable table = formats_table();
  report::CsvRow header = table.header;
  header[0] = "property";
  csv_table(page, options, "part1_formats.csv", header, table.rows, "The formats side by side (fp8kit formats)");
  page.callout(std::string(kFormatsNote), report::Tone::Info);
  page.paragraph(fmt::format("Representable values in [1, 2): E4M3 has {} ({}); E5M2 has {} ({}).",
                             1 << kE4M3.mantissa_bits, values_in_one_two(Fp8Format::E4M3), 1 << kE5M2.mantissa_bits,
                             values_in_one_two(Fp8Format::E5M2)));

  page.heading("Precision by magnitude", 3);
  // Within a binade [2^e, 2^(e+1)) the step is constant, so its relative size is largest at 2^e: the
  // plot shows that worst case for every binade from 2^-26 to 2^19.
  report::LinePlot plot{.title = "Relative step between neighbouring values (worst in each binade)",
                        .x = {.label = "value magnitude (powers of two)", .log = true},
                        .y = {.label = "(next value - value) / value at 2^e", .log = true, .min = 1e-3, .max = 10.0}};
  const char* labels[] = {"e4m3", "e5m2", "bf16"};
  for (const char* label : labels) plot.series.push_back({.label = label});
  std::vector<report::CsvRow> rows;
  for (int e = -26; e <= 19; ++e) {
    const float v = std::ldexp(1.0f, e);
    const double steps[] = {fp8_relative_step(v, Fp8Format::E4M3), fp8_relative_step(v, Fp8Format::E5M2),
                            bf16_relative_step(v)};
    for (int k = 0; k < 3; ++k) plot.series[k].x.push_back(v), plot.series[k].y.push_back(steps[k]);
    rows.push_back({num(v), num(steps[0]), num(steps[1]), num(steps[2])});
  }
  page.plot(plot,
            "Normal values have a constant relative step, at most 2^-m (12.5% for E4M3, 25% for E5M2, 0.78% for "
            "bf16); the worst rounding error is half of it. Below the smallest normal value (E4M3 2^-6, E5M2 "
            "2^-14) the step stops shrinking and precision falls away until values flush to zero; each line ends "
            "at the format's last binade.");
  csv_link(page, options, "part1_precision_by_magnitude.csv",
           {"magnitude", "e4m3_relative_step", "e5m2_relative_step", "bf16_relative_step"}, rows);

  struct Typical {
    float value;
    const char* what;
  };
  const Typical typical[] = {{1e-7f, "tiny gradient"},      {1e-6f, "typical gradient"},
                             {1e-3f, "small weight"},       {0.02f, "weight (init std)"},
                             {1.0f, "activation"},          {100.0f, "outlier activation"},
                             {448.0f, "E4M3's max finite"}, {1000.0f, "large gradient or loss"},
                             {57344.0f, "E5M2's max finite"}, {1e5f, "beyond both"}};
  std::vector<report::CsvRow> typical_rows;
  for (const Typical& t : typical) {
    typical_rows.push_back({num(t.value), t.what, step_cell(t.value, Fp8Format::E4M3),
                            step_cell(t.value, Fp8Format::E5M2),
                            fmt::format("step {}", percent(bf16_relative_step(t.value)))});
  }
  csv_table(page, options, "part1_typical_magnitudes.csv", {"value", "what", "e4m3", "e5m2", "bf16"}, typical_rows,
            "What a cast without a scale does at typical magnitudes (step: the relative gap to the next value)");
  page.callout(
      "Without a scale neither format holds a gradient of 1e-6 well and E4M3 saturates at 448: FP8 needs a "
      "per-tensor scale that moves each tensor's amax up to the format's max (Part 4).",
      report::Tone::Warn);
}

}  // namespace fp8kit::lab
