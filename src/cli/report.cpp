// `fp8kit report RUN_DIR`: a training run's FP8 health report, one self-contained HTML page
// (report/health.h): the loss and accuracy curves, each FP8 tensor's statistics, what to change.
#include "base/error.h"
#include "cli/command.h"
#include "cli/options.h"
#include "report/health.h"

#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <string>

namespace fp8kit::cli {
namespace {

namespace fs = std::filesystem;

struct Args {
  std::string run;
  std::string out;
  report::HealthThresholds thresholds;
  double saturation_percent = 100 * report::HealthThresholds{}.saturation;
  double underflow_percent = 100 * report::HealthThresholds{}.underflow;
};

void run(Args args) {
  args.thresholds.saturation = args.saturation_percent / 100;
  args.thresholds.underflow = args.underflow_percent / 100;
  const report::RunLog log = report::read_run_log(args.run);
  const std::vector<report::HealthFinding> findings = report::diagnose(log, args.thresholds);
  const fs::path out = args.out.empty() ? fs::path(args.run) / "report.html" : fs::path(args.out);
  FP8KIT_CHECK(!fs::is_directory(out), "--out {} is a directory: give the HTML file to write, e.g. {}", out.string(),
               (out / "report.html").string());
  if (out.has_parent_path()) fs::create_directories(out.parent_path());
  report::health_report(log, args.thresholds).write(out.string());
  size_t tensors = 0;
  for (const report::PrecisionLog& p : log.precisions) tensors += p.tensors.size();
  if (tensors == 0) {
    fmt::print("No FP8 health statistics in {} (curves only): FP8 training with per-tensor scales (--recipe delayed "
               "or current; block scaling keeps none) records them every --health-every N steps\n",
               args.run);
  } else if (findings.empty()) {
    fmt::print("All {} FP8 tensors healthy\n", tensors);
  } else {
    fmt::print("{} of {} FP8 tensors flagged:\n", findings.size(), tensors);
    for (const report::HealthFinding& f : findings) fmt::print("  {} {}: {}\n", f.precision, f.tensor, f.problem);
  }
  fmt::print("Report: {}\n", out.string());
}

void setup(CLI::App& app) {
  auto args = std::make_shared<Args>();
  app.add_option("run", args->run, "a training run's --out directory (fp8kit train, fp8kit lm train), or a folder of them")
      ->required()
      ->check(non_empty_path());
  app.add_option("--out", args->out, "the HTML page to write (default: RUN/report.html)")->check(non_empty_path());
  app.add_option("--max-saturation", args->saturation_percent, "flag a tensor with more than this % of values saturated")
      ->capture_default_str()
      ->check(real_number(0, 100));
  app.add_option("--max-underflow", args->underflow_percent,
                 "flag a tensor with more than this % of values flushed to zero or subnormal")
      ->capture_default_str()
      ->check(real_number(0, 100));
  app.add_option("--min-snr", args->thresholds.snr_db, "flag a tensor whose quantization SNR falls below this (dB)")
      ->capture_default_str()
      ->check(real_number(-1000, 1000));
  app.callback([args] { run(*args); });
}

const bool registered =
    register_command({"report", "A training run's FP8 health report: curves, per-tensor statistics, advice (HTML)", setup});

}  // namespace
}  // namespace fp8kit::cli
