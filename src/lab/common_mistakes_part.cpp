// The lab's three "Common Mistakes", each measured with real FP8 casts: the wrong way and the right one
// on the same tensors.
#include "lab/fp8_error.h"
#include "lab/lab.h"
#include "lab/page.h"
#include "numerics/convert.h"
#include "numerics/scale.h"

#include <fmt/format.h>

#include <string>
#include <vector>

namespace fp8kit::lab {
namespace {

using report::Tone;

struct Case {
  const std::vector<float>* tensor;
  std::string tensor_name;
  Fp8Format format;
  bool scaled;  // per-tensor scale fp8_max / amax, else cast as is
  bool right;
};

}  // namespace

void common_mistakes_part(report::HtmlPage& page, const LabOptions& options) {
  page.heading("Common mistakes, measured");
  page.paragraph(
      "The lab's three common mistakes, each done the wrong way and the right way on the same tensors (the "
      "sample tensors of `fp8kit quant-error`, this run's seed). Relative error is mean |error| / mean |x|.");
  const std::vector<SampleTensor> samples = sample_tensors(options.seed);
  const std::vector<float>& weights = samples[0].values;
  const std::vector<float>& activations = samples[1].values;
  const std::vector<float>& small_gradients = samples[2].values;
  Normal normal(options.seed + 1);
  const std::vector<float> large_gradients = normal_tensor(normal, 1 << 16, 1000.0f);

  struct Mistake {
    std::string title, explanation;
    std::vector<Case> cases;
  };
  const std::vector<Mistake> mistakes{
      {"Mistake 1: using E5M2 for inference weights",
       "Weights and activations need precision, not range: with the same per-tensor scale E5M2 has one "
       "mantissa bit less, so about twice the error.",
       {{&weights, samples[0].name, Fp8Format::E5M2, true, false},
        {&weights, samples[0].name, Fp8Format::E4M3, true, true},
        {&activations, samples[1].name, Fp8Format::E5M2, true, false},
        {&activations, samples[1].name, Fp8Format::E4M3, true, true}}},
      {"Mistake 2: forgetting to scale gradients",
       "Clamping gradients to +-448 and casting them as they are loses them both ways: small ones flush to zero, "
       "large ones saturate. A scale from the amax (history) moves them into the format's range.",
       {{&small_gradients, samples[2].name, Fp8Format::E4M3, false, false},
        {&small_gradients, samples[2].name, Fp8Format::E4M3, true, true},
        {&large_gradients, "large gradients N(0, 1000)", Fp8Format::E4M3, false, false},
        {&large_gradients, "large gradients N(0, 1000)", Fp8Format::E4M3, true, true}}},
      {"Mistake 3: casting by hand without autocast's scales",
       "x.to(float8_e4m3fn) casts with scale 1. Transformer Engine's fp8_autocast (fp8kit's Fp8Recipe and "
       "ScalingTable, which Parts 2 and 3 use) keeps a scale per tensor: without it weights sit among E4M3's "
       "subnormals and activation outliers saturate.",
       {{&weights, samples[0].name, Fp8Format::E4M3, false, false},
        {&weights, samples[0].name, Fp8Format::E4M3, true, true},
        {&activations, samples[1].name, Fp8Format::E4M3, false, false},
        {&activations, samples[1].name, Fp8Format::E4M3, true, true}}},
  };
  std::vector<report::CsvRow> csv_rows;
  for (const Mistake& mistake : mistakes) {
    page.heading(mistake.title, 3);
    page.paragraph(mistake.explanation);
    std::vector<report::CsvRow> rows;
    std::vector<Tone> tones;
    std::string measured;
    double wrong_error = 0;
    for (const Case& c : mistake.cases) {
      const float scale = c.scaled ? current_scale(amax(*c.tensor), c.format) : 1.0f;
      const ErrorStats s = quantization_error(*c.tensor, c.format, scale);
      report::CsvRow row{c.right ? "right" : "wrong", c.tensor_name, std::string(name(c.format)),
                         c.scaled ? "per-tensor scale" : "none (cast as is)", percent(s.relative),
                         fmt::format("{:.2f}", s.snr_db), num(s.flushed_pct), num(s.saturated_pct)};
      // Cases come in pairs, the wrong way first.
      if (!c.right) {
        wrong_error = s.relative;
      } else {
        measured += fmt::format("{}{} {:.3g}x the error", measured.empty() ? "Done wrong: " : "; ", c.tensor_name,
                                wrong_error / s.relative);
      }
      rows.push_back(row);
      tones.push_back(c.right ? Tone::Good : Tone::Bad);
      row.insert(row.begin(), mistake.title);
      csv_rows.push_back(std::move(row));
    }
    page.table({"way", "tensor", "format", "scaling", "relative error", "SNR dB", "flushed %", "saturated %"}, rows,
               {}, tones);
    page.callout(measured + ".", Tone::Info);
  }
  csv_link(page, options, "common_mistakes.csv",
           {"mistake", "way", "tensor", "format", "scaling", "relative error", "SNR dB", "flushed %", "saturated %"},
           csv_rows);
}

}  // namespace fp8kit::lab
