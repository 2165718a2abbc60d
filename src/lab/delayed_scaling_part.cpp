// Part 4 of the lab (delayed scaling on the lab's gradually growing tensors, done with TE's one-step
// lag and real E4M3 casts) and exercise 1 (amax histories of 4, 8, 16, 32 steps on rapidly changing
// magnitudes).
#include "lab/fp8_error.h"
#include "lab/lab.h"
#include "lab/page.h"

#include <fmt/format.h>

#include <algorithm>
#include <string>
#include <vector>

namespace fp8kit::lab {
namespace {

using report::Tone;

constexpr int kExerciseSteps = 40;

void lab_scenario(report::HtmlPage& page, const LabOptions& options) {
  page.paragraph(
      "The lab's scenario: 16 steps of 1000 normal values with std 0.1 + 0.1 t, quantized in E4M3 with an "
      "amax history of 8 steps. Done as Transformer Engine does it: step t's scale comes from the amaxes of "
      "earlier steps only (the one-step lag; step 0 has none and uses scale 1), the scale is 448 / amax, and "
      "the cast is real E4M3. The last column is what the lab's DelayedScalingSimulator reports for the same "
      "tensors: it puts the current amax in the history before scaling (no delay at all) and rounds to a "
      "fixed grid of 1/8 instead of FP8's 3 mantissa bits.");
  const std::vector<LabStep> steps = lab_part4(options.seed);
  std::vector<report::CsvRow> rows;
  std::vector<Tone> tones;
  int saturated = 0;
  double proper = 0, lab = 0;
  report::PlotSeries tensor_amax{.label = "tensor amax"}, covered{.label = "amax the scale covers (448 x scale_inv)"};
  report::PlotSeries error{.label = "real E4M3, one-step lag"},
      lab_error{.label = "the lab's simulator (no lag, fixed grid)", .dashed = true};
  for (size_t t = 0; t < steps.size(); ++t) {
    const StepResult& r = steps[t].proper;
    rows.push_back({std::to_string(t), num(r.amax), num(r.scale_inv), num(r.error.mean_abs),
                    num(r.error.saturated_pct), num(r.error.flushed_pct), num(steps[t].lab_error)});
    tones.push_back(r.error.saturated_pct > 0 ? Tone::Warn : Tone::Info);
    saturated += r.error.saturated_pct > 0;
    proper += r.error.mean_abs, lab += steps[t].lab_error;
    const auto x = static_cast<double>(t);
    tensor_amax.x.push_back(x), tensor_amax.y.push_back(r.amax);
    covered.x.push_back(x), covered.y.push_back(448.0 * r.scale_inv);
    error.x.push_back(x), error.y.push_back(r.error.mean_abs);
    lab_error.x.push_back(x), lab_error.y.push_back(steps[t].lab_error);
  }
  csv_table(page, options, "part4_delayed_scaling.csv",
            {"step", "tensor max", "scale_inv", "mean |error|", "saturated %", "flushed %",
             "lab simulator's mean |error|"},
            rows, "Delayed scaling, history 8, E4M3 (rows with saturated values highlighted)", tones);
  page.plot({.title = "Part 4: the amax each step's scale covers",
             .x = {.label = "step"},
             .y = {.label = "amax", .log = true},
             .series = {tensor_amax, covered}},
            "Step 0 has no history (scale 1 covers 448). From step 1 on the scale covers the largest earlier amax, "
            "which a growing tensor has already outgrown: its top values saturate at 448.");
  page.plot({.title = "Part 4: mean |error| per step", .x = {.label = "step"},
             .y = {.label = "mean |x - dq(q(x))|", .log = true}, .series = {error, lab_error}});
  page.callout(fmt::format("{} of {} steps saturate: the one-step lag means the scale always trails a growing "
                           "tensor. The lab's simulator reports a mean error {:.3g}x smaller than real E4M3 with "
                           "the lag, because it has neither the lag nor FP8's exponent-scaled steps.",
                           saturated, steps.size(), lab > 0 ? proper / lab : 0.0),
               saturated > 0 ? Tone::Warn : Tone::Info);
}

void exercise_1(report::HtmlPage& page, const LabOptions& options) {
  page.heading("Exercise 1: amax history length on rapidly changing magnitudes");
  page.paragraph(fmt::format(
      "Histories of 4, 8, 16 and 32 steps (the history's max), beside most_recent and current scaling (the "
      "tensor's own amax, no history), on {} steps of E4M3 tensors whose magnitude changes fast: growing 1.5x "
      "a step, a single 10000x spike, and decaying 0.7x a step. Relative error = mean |x - dq(q(x))| / mean "
      "|x|; saturated values are clamped to 448, flushed ones become 0.",
      kExerciseSteps));
  std::vector<Method> methods;
  for (const Method& m : scaling_methods()) {
    if (m.recipe.lag == ScalingLag::Te) methods.push_back(m);  // Keras's lag is not the exercise's question
  }
  std::vector<report::CsvRow> summary_rows, step_rows;
  std::string findings;
  for (const Scenario& scenario : delayed_scenarios()) {
    if (scenario.id == "linear_growth") continue;  // Part 4's
    page.heading(scenario.title, 3);
    std::vector<report::CsvRow> rows;
    std::vector<RunSummary> summaries;
    report::LinePlot error_plot{.title = fmt::format("Relative error per step: {}", scenario.title),
                                .x = {.label = "step"},
                                .y = {.label = "mean |x - dq(q(x))| / mean |x|", .log = true}};
    report::LinePlot scale_plot{.title = fmt::format("Tensor amax and the amax each scale covers: {}", scenario.title),
                                .x = {.label = "step"},
                                .y = {.label = "amax (448 x scale_inv for the scales)", .log = true}};
    // Every method quantizes the same tensors (the same seed), so any run gives the tensors' amaxes.
    report::PlotSeries tensor_amax{.label = "tensor amax", .color = "#000000"};
    for (const StepResult& r : simulate(scenario, methods.front().recipe, kExerciseSteps, options.seed)) {
      tensor_amax.x.push_back(static_cast<double>(tensor_amax.x.size())), tensor_amax.y.push_back(r.amax);
    }
    scale_plot.series.push_back(std::move(tensor_amax));
    for (const Method& m : methods) {
      const std::vector<StepResult> results = simulate(scenario, m.recipe, kExerciseSteps, options.seed);
      report::PlotSeries error{.label = m.label, .dashed = m.recipe.mode == ScalingMode::Current};
      report::PlotSeries covered = error;
      for (size_t t = 0; t < results.size(); ++t) {
        const StepResult& r = results[t];
        const auto x = static_cast<double>(t);
        error.x.push_back(x), error.y.push_back(r.error.relative);
        covered.x.push_back(x), covered.y.push_back(448.0 * r.scale_inv);
        step_rows.push_back({scenario.id, m.label, std::to_string(t), num(r.magnitude), num(r.amax), num(r.scale_inv),
                             num(r.error.relative), num(r.error.saturated_pct), num(r.error.flushed_pct)});
      }
      const RunSummary s = summarize(results);
      summaries.push_back(s);
      rows.push_back({m.label, percent(s.mean_relative), percent(s.worst_relative), std::to_string(s.saturated_steps),
                      num(s.max_saturated_pct), num(s.mean_flushed_pct)});
      summary_rows.push_back({scenario.id, m.label, num(100 * s.mean_relative), num(100 * s.worst_relative),
                              std::to_string(s.saturated_steps), num(s.max_saturated_pct), num(s.mean_flushed_pct)});
      error_plot.series.push_back(std::move(error));
      if (m.recipe.mode == ScalingMode::Delayed && m.recipe.amax_algorithm == AmaxAlgorithm::Max) {
        scale_plot.series.push_back(std::move(covered));
      }
    }
    // The best and worst of the four history lengths (the first four methods) in this scenario.
    const auto by_mean = [](const RunSummary& a, const RunSummary& b) { return a.mean_relative < b.mean_relative; };
    const auto best = std::min_element(summaries.begin(), summaries.begin() + 4, by_mean) - summaries.begin();
    const auto worst = std::max_element(summaries.begin(), summaries.begin() + 4, by_mean) - summaries.begin();
    // History lengths within 1% of each other count as a tie: nothing to highlight.
    const bool tie = summaries[worst].mean_relative < 1.01 * summaries[best].mean_relative;
    std::vector<Tone> tones(rows.size(), Tone::Info);
    if (!tie) tones[worst] = Tone::Bad, tones[best] = Tone::Good;
    page.table({"method", "mean relative error", "worst step", "steps with saturation", "max saturated %",
                "mean flushed %"},
               rows,
               fmt::format("{} steps, E4M3 (best history length green, worst red, unless they tie)", kExerciseSteps),
               tones);
    page.plot(error_plot);
    page.plot(scale_plot, "Above the black line (the tensor's own amax) a scale leaves range unused and small "
                          "values lose precision or flush to zero; below it, the top values saturate at 448.");
    findings += tie ? fmt::format("{}: every history length gives {} mean error. ", scenario.title,
                                  percent(summaries[best].mean_relative))
                    : fmt::format("{}: {} is best ({} mean error), {} worst ({}). ", scenario.title,
                                  methods[best].label, percent(summaries[best].mean_relative), methods[worst].label,
                                  percent(summaries[worst].mean_relative));
  }
  csv_link(page, options, "exercise1_history_summary.csv",
           {"scenario", "method", "mean_relative_error_pct", "worst_relative_error_pct", "saturated_steps",
            "max_saturated_pct", "mean_flushed_pct"},
           summary_rows);
  csv_link(page, options, "exercise1_history_steps.csv",
           {"scenario", "method", "step", "std", "amax", "scale_inv", "relative_error", "saturated_pct",
            "flushed_pct"},
           step_rows);
  page.callout(findings +
                   "A growing tensor is the newest amax, so every history length gives the same scale and the "
                   "one-step lag saturates alike. After a spike a history of L steps keeps the scale small for L "
                   "steps, so longer histories hurt longer; during a decay a long history holds a stale amax "
                   "until small values flush. Short histories (or current scaling) follow fast changes; long "
                   "ones only help when a rare large amax must not saturate again soon after.",
               Tone::Info);
}

}  // namespace

void delayed_scaling_part(report::HtmlPage& page, const LabOptions& options) {
  page.heading("Part 4: Delayed scaling for numerical stability");
  lab_scenario(page, options);
  exercise_1(page, options);
}

}  // namespace fp8kit::lab
