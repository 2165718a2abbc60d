// The FP8 health report of a training run (`fp8kit report`): the run directory's metrics log read
// back (loss and accuracy curves per precision, the "health" events that train/health.h writes),
// each FP8 tensor checked against thresholds with advice on the recipe, and one self-contained page.
#pragma once

#include "report/html.h"

#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace fp8kit::report {

// When a tensor is flagged (at any recorded step). README's "FP8 health report" documents them.
struct HealthThresholds {
  // Fraction of values clamped at the format's max: 0.01%, counted only when the largest was clamped
  // by more than the format's rounding step there (|x * scale| past 464 for E4M3, 61440 for E5M2):
  // values up to that round to the max anyway.
  double saturation = 1e-4;
  double underflow = 0.01;   // fraction flushed to zero or landing among the subnormals: 1%
  double snr_db = 20;        // quantization signal-to-noise ratio below this
  // Any NaN or inf in a quantized tensor is flagged.
};

// One recording of one FP8 tensor.
struct TensorSample {
  int64_t step = 0;
  double amax = 0, scale = 0, history_amax = 0;
  double saturated = 0, flushed = 0, subnormal = 0, nonfinite = 0;
  std::optional<double> snr_db;  // none: an all-zero tensor or an exact cast
  double underflow() const { return flushed + subnormal; }
};

struct TensorHistory {
  std::string name;    // "model.layers.0.mlp.up_proj/inputs"
  std::string format;  // "e4m3" / "e5m2"
  std::vector<TensorSample> samples;  // in step order
};

// What one precision of a run logged (a run of `fp8kit train --compare` holds several).
struct PrecisionLog {
  std::string label;  // "fp8", or "fp8 (out/lm-fp8)" when several directories are read
  // "loss", "accuracy", "val_loss", ...: step (LM runs) or epoch (the seed trainer) -> value; a
  // resumed run's repeated points keep the last value.
  std::map<std::string, std::map<double, double>> curves;
  std::map<std::string, double> final_metrics;            // test accuracy and loss, last validation
  std::string recipe;                                     // from the health events (or the run line)
  std::string scaling_mode;                               // "delayed", "current", or "" (unknown)
  int64_t amax_history = 0, margin = 0;
  std::vector<TensorHistory> tensors;                     // empty: no health events
  bool diverged = false;
};

struct RunLog {
  std::filesystem::path dir;
  std::string kind;  // "lm" (steps) or "classifier" (epochs)
  std::vector<PrecisionLog> precisions;
  std::vector<std::string> notes;  // e.g. an unfinished last line skipped
};

// Reads dir/metrics.jsonl, or each dir/*/metrics.jsonl when dir holds none (several `lm train` runs
// under one folder). Throws fp8kit::Error naming the file (and line) for a missing directory, no
// metrics log, a log without any training event, or a line that is not a JSON object (an unfinished last line, which a killed run
// leaves, is skipped with a note).
RunLog read_run_log(const std::filesystem::path& dir);

// Reads one metrics log into `run`, its precisions labelled with `suffix` appended; the same errors.
void read_metrics_log(const std::filesystem::path& file, RunLog& run, const std::string& suffix = "");

// A flagged tensor: its worst recording and what to change.
struct HealthFinding {
  std::string precision, tensor, format;
  std::string problem;  // "saturation 0.31%", ...
  int64_t step = 0;     // the worst recording's step
  int recordings = 0, flagged = 0;  // how many recordings, and how many of them passed the threshold
  std::string advice;
};

std::vector<HealthFinding> diagnose(const RunLog& run, const HealthThresholds& thresholds = {});

// The page: the summary table of findings (or "all healthy"), the curves, then per FP8 precision
// the tensors' histories (amax and scale, saturation, underflow, SNR) and a table of every tensor.
HtmlPage health_report(const RunLog& run, const HealthThresholds& thresholds = {});

}  // namespace fp8kit::report
