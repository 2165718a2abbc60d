// The health report: metrics logs read line by line (each line's kind of event to its precision),
// each FP8 tensor's recordings checked against the thresholds, advice from what the recordings show
// (the amax against the history's max, the format, the recipe), and the page.
#include "report/health.h"

#include "base/error.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

namespace fp8kit::report {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr size_t kSeriesPerPlot = 8;
// A tensor's colour on every plot of its section (its amax and history max share one).
constexpr const char* kColors[kSeriesPerPlot] = {"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                                 "#9467bd", "#8c564b", "#e377c2", "#17becf"};

std::string read_text(const fs::path& path) {
  // An ifstream opens a directory and reads it as empty: it would pass for a log with no events.
  FP8KIT_CHECK(!fs::is_directory(path), "{} is a directory, not a metrics log: give the --out directory of a training "
               "run", path.string());
  std::ifstream in(path, std::ios::binary);
  FP8KIT_CHECK(in.is_open(), "cannot read {}", path.string());
  std::ostringstream text;
  text << in.rdbuf();
  return std::move(text).str();
}

// One line's event, with where it came from for errors.
struct Line {
  const json& event;
  const fs::path& file;
  size_t number;

  // A number field (null, as the log writes NaN and inf, reads as NaN); nullopt when absent.
  std::optional<double> number_of(const std::string& key) const {
    const auto it = event.find(key);
    if (it == event.end()) return std::nullopt;
    if (it->is_null()) return std::numeric_limits<double>::quiet_NaN();
    FP8KIT_CHECK(it->is_number(), "{}:{}: \"{}\" must be a number, not {}: the metrics log is corrupt", file.string(),
                 number, key, it->dump());
    return it->get<double>();
  }
  std::string text_of(const std::string& key) const {
    const auto it = event.find(key);
    if (it == event.end() || it->is_null()) return "";
    FP8KIT_CHECK(it->is_string() || it->is_number(), "{}:{}: \"{}\" must be text, not {}: the metrics log is corrupt",
                 file.string(), number, key, it->dump());
    return it->is_string() ? it->get<std::string>() : it->dump();
  }
  // An array field of `n` entries.
  const json& array_of(const std::string& key, size_t n) const {
    const auto it = event.find(key);
    FP8KIT_CHECK(it != event.end() && it->is_array() && it->size() == n,
                 "{}:{}: the health event's \"{}\" must be an array of {} values, one per tensor: the metrics log is "
                 "corrupt",
                 file.string(), number, key, n);
    return *it;
  }
};

double value_at(const Line& line, const json& array, size_t i, const char* key) {
  const json& v = array[i];
  if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();
  FP8KIT_CHECK(v.is_number(), "{}:{}: the health event's \"{}\"[{}] must be a number, not {}", line.file.string(),
               line.number, key, i, v.dump());
  return v.get<double>();
}

void read_health(const Line& line, PrecisionLog& log) {
  const json& names = line.event.contains("tensors") ? line.event["tensors"] : json();
  FP8KIT_CHECK(names.is_array(), "{}:{}: a health event needs \"tensors\", the FP8 tensors' names",
               line.file.string(), line.number);
  const size_t n = names.size();
  const std::optional<double> step = line.number_of("step");
  FP8KIT_CHECK(step && *step >= 0 && *step < 0x1p53, "{}:{}: a health event needs its \"step\", a whole number",
               line.file.string(), line.number);
  log.recipe = line.text_of("recipe");
  if (const auto s = line.event.find("scaling"); s != line.event.end() && s->is_object()) {
    const Line scaling{*s, line.file, line.number};
    log.scaling_mode = scaling.text_of("mode");
    const auto whole = [&](const char* key) {  // recipe settings: whole numbers well inside int64
      const double v = scaling.number_of(key).value_or(0.0);
      return std::isfinite(v) ? static_cast<int64_t>(std::clamp(v, -1e9, 1e9)) : 0;
    };
    log.amax_history = whole("amax_history");
    log.margin = whole("margin");
  }
  const json& formats = line.array_of("format", n);
  const char* keys[] = {"amax", "scale", "history_amax", "saturated", "flushed", "subnormal", "nonfinite", "snr_db"};
  std::vector<const json*> columns;
  for (const char* key : keys) columns.push_back(&line.array_of(key, n));
  for (size_t i = 0; i < n; ++i) {
    FP8KIT_CHECK(names[i].is_string() && formats[i].is_string(), "{}:{}: tensor {} of the health event has no name",
                 line.file.string(), line.number, i);
    const std::string name = names[i].get<std::string>();
    auto it = std::find_if(log.tensors.begin(), log.tensors.end(), [&](const TensorHistory& t) { return t.name == name; });
    if (it == log.tensors.end()) {
      log.tensors.push_back({name, formats[i].get<std::string>(), {}});
      it = log.tensors.end() - 1;
    }
    double v[8];
    for (size_t k = 0; k < 8; ++k) v[k] = value_at(line, *columns[k], i, keys[k]);
    TensorSample sample{static_cast<int64_t>(*step), v[0], v[1], v[2], v[3], v[4], v[5], v[6],
                        std::isnan(v[7]) ? std::nullopt : std::optional<double>(v[7])};
    // A resumed run records a step again: the last recording wins.
    auto& samples = it->samples;
    const auto at = std::lower_bound(samples.begin(), samples.end(), sample.step,
                                     [](const TensorSample& s, int64_t k) { return s.step < k; });
    if (at != samples.end() && at->step == sample.step) {
      *at = sample;
    } else {
      samples.insert(at, sample);
    }
  }
}

PrecisionLog& precision_log(RunLog& run, const std::string& label) {
  for (PrecisionLog& p : run.precisions)
    if (p.label == label) return p;
  run.precisions.push_back({});
  run.precisions.back().label = label;
  return run.precisions.back();
}

}  // namespace

void read_metrics_log(const fs::path& file, RunLog& run, const std::string& suffix) {
  const std::string text = read_text(file);
  std::istringstream in(text);
  std::string recipe_mode;  // the run line's --recipe, for FP8 precisions without health events
  size_t number = 0;
  for (std::string raw; std::getline(in, raw);) {
    ++number;
    if (raw.find_first_not_of(" \t\r") == std::string::npos) continue;
    const json event = json::parse(raw, nullptr, /*allow_exceptions=*/false);
    if (!event.is_object()) {
      // A kill while writing leaves a last line without its newline (the trainer drops it on resume).
      if (in.eof() && !text.ends_with('\n')) {
        run.notes.push_back(fmt::format("{}:{}: an unfinished last line (a run killed while writing it) was skipped",
                                        file.string(), number));
        break;
      }
      fail("{}:{}: not a JSON object: the metrics log is corrupt (each line of it is one event written by fp8kit "
           "train or fp8kit lm train)",
           file.string(), number);
    }
    const Line line{event, file, number};
    const std::string kind = line.text_of("event");
    if (kind == "run") {
      if (line.text_of("model") == "llama") run.kind = "lm";
      if (event.contains("precisions")) run.kind = "classifier";
      recipe_mode = line.text_of("recipe");
      continue;
    }
    const std::string precision = line.text_of("precision");
    if (precision.empty()) continue;  // events of other kinds (none yet) are not ours to judge
    PrecisionLog& log = precision_log(run, precision + suffix);
    if (log.scaling_mode.empty() && precision == "fp8") log.scaling_mode = recipe_mode;
    auto point = [&](const std::string& curve, const std::string& key, double x) {
      if (const auto y = line.number_of(key); y && std::isfinite(x)) log.curves[curve][x] = *y;
    };
    if (kind == "epoch") {
      const double epoch = line.number_of("epoch").value_or(NAN);
      for (const char* key : {"loss", "accuracy", "val_loss", "val_accuracy"}) point(key, key, epoch);
      if (run.kind.empty()) run.kind = "classifier";
    } else if (kind == "test") {
      for (const char* key : {"accuracy", "loss"})
        if (const auto v = line.number_of(key)) log.final_metrics[fmt::format("test {}", key)] = *v;
    } else if (kind == "step") {
      point("loss", "loss", line.number_of("step").value_or(NAN));
      if (run.kind.empty()) run.kind = "lm";
    } else if (kind == "validation") {
      const double step = line.number_of("step").value_or(NAN);
      point("val_loss", "loss", step);
      point("val_perplexity", "perplexity", step);
      if (const auto v = line.number_of("loss")) log.final_metrics["validation loss"] = *v;
      if (const auto v = line.number_of("perplexity")) log.final_metrics["validation perplexity"] = *v;
    } else if (kind == "diverged") {
      log.diverged = true;
    } else if (kind == "health") {
      read_health(line, log);
    }
  }
}

namespace {

std::string percent(double fraction) { return std::isfinite(fraction) ? fmt::format("{:.3g}%", 100 * fraction) : "n/a"; }
std::string decibels(std::optional<double> db) { return db && std::isfinite(*db) ? fmt::format("{:.1f} dB", *db) : "n/a"; }
std::string number(double v) { return std::isfinite(v) ? fmt::format("{:.4g}", v) : "n/a"; }

// The tensor's role from its slot name: "inputs", "kernel" (the weight) or "outputs_grad".
std::string role_of(const std::string& name) {
  const size_t slash = name.rfind('/');
  return slash == std::string::npos ? name : name.substr(slash + 1);
}

const TensorSample& worst(const TensorHistory& t, auto badness) {
  return *std::max_element(t.samples.begin(), t.samples.end(),
                           [&](const TensorSample& a, const TensorSample& b) { return badness(a) < badness(b); });
}

// Whether the tensor's largest value was clamped by more than the format's rounding step at its max
// (448 + 16 for E4M3, 57344 + 4096 for E5M2): below that, the values past the max round to it anyway,
// and the cast is what it would be without saturation.
bool clamps(const TensorHistory& t, const TensorSample& s) {
  return s.amax * s.scale > (t.format == "e5m2" ? 61440.0 : 464.0);
}

double snr_or_max(const TensorSample& s) { return s.snr_db.value_or(std::numeric_limits<double>::infinity()); }

std::string saturation_advice(const PrecisionLog& p, const TensorHistory& t, const TensorSample& w) {
  std::string advice;
  if (p.scaling_mode == "delayed" && w.history_amax > 0 && w.amax > w.history_amax) {
    const int k = static_cast<int>(std::clamp(std::ceil(std::log2(w.amax / w.history_amax)), 1.0, 16.0));
    advice = fmt::format(
        "The tensor's amax ({}) outgrew the amax history's max ({}) that set the scale: delayed scaling lags a "
        "growing tensor. --margin {} leaves the 2^{} headroom this step needed; --recipe current scales each step "
        "from its own amax.",
        number(w.amax), number(w.history_amax), k, k);
  } else if (p.scaling_mode == "delayed") {
    advice = "Delayed scaling clamped values beyond the scale's range (early steps quantize with scale 1 before any "
             "history): a --margin, or --recipe current.";
  } else {
    advice = "Current scaling takes the scale from this amax, so clamping comes from the scale options "
             "(--power-of-two-scales rounds down; a negative margin is refused): look for outliers in this tensor.";
  }
  if (role_of(t.name) == "outputs_grad" && t.format == "e4m3")
    advice += " Gradients in E4M3: --formats hybrid gives them E5M2's 2^16 times wider range.";
  return advice;
}

std::string underflow_advice(const PrecisionLog& p, const TensorHistory& t, const TensorSample& w) {
  std::string advice;
  if (p.scaling_mode == "delayed" && w.amax > 0 && w.history_amax > 4 * w.amax) {
    advice = fmt::format(
        "The amax history's max ({}) is {:.0f}x this step's amax ({}): the scale comes from an old peak, so small "
        "values flush. A shorter --amax-history (now {}) or --amax-algo most_recent follows the tensor down; "
        "--recipe current scales each step from its own amax.",
        number(w.history_amax), w.history_amax / w.amax, number(w.amax), p.amax_history);
  } else {
    advice = fmt::format(
        "The scale fits the amax, so the values span more than {}'s range below it (E4M3: 2^15 from max to its "
        "smallest subnormal, E5M2: 2^31): one scale per tensor cannot hold both ends. Block scaling (--recipe "
        "block: a scale per 1x128 group) keeps small groups' values.",
        t.format == "e5m2" ? "E5M2" : "E4M3");
  }
  if (p.margin > 0) advice += fmt::format(" --margin {} gives up 2^{} at the bottom of the range: lower it.", p.margin, p.margin);
  if (role_of(t.name) == "outputs_grad" && t.format == "e4m3")
    advice += " Gradients in E4M3: --formats hybrid gives them E5M2's range.";
  return advice;
}

}  // namespace

RunLog read_run_log(const fs::path& dir) {
  FP8KIT_CHECK(fs::exists(dir), "{} does not exist: give the --out directory of fp8kit train or fp8kit lm train",
               dir.string());
  FP8KIT_CHECK(fs::is_directory(dir), "{} is not a directory: give the --out directory of a training run",
               dir.string());
  std::vector<fs::path> logs;
  if (fs::exists(dir / "metrics.jsonl")) {
    logs.push_back(dir / "metrics.jsonl");
  } else {
    for (const fs::directory_entry& e : fs::directory_iterator(dir))
      if (e.is_directory() && fs::exists(e.path() / "metrics.jsonl")) logs.push_back(e.path() / "metrics.jsonl");
    std::sort(logs.begin(), logs.end());
  }
  FP8KIT_CHECK(!logs.empty(),
               "{} holds no metrics.jsonl (nor do its subdirectories): give the --out directory of fp8kit train or "
               "fp8kit lm train",
               dir.string());
  RunLog run;
  run.dir = dir;
  for (const fs::path& log : logs)
    read_metrics_log(log, run, logs.size() > 1 ? fmt::format(" ({})", log.parent_path().filename().string()) : "");
  FP8KIT_CHECK(!run.precisions.empty(),
               "{} holds no training events yet (an empty log, or a run stopped before its first epoch or step): "
               "nothing to report until the run has trained",
               logs.size() == 1 ? logs.front().string() : dir.string());
  return run;
}

std::vector<HealthFinding> diagnose(const RunLog& run, const HealthThresholds& th) {
  std::vector<HealthFinding> findings;
  for (const PrecisionLog& p : run.precisions) {
    for (const TensorHistory& t : p.tensors) {
      if (t.samples.empty()) continue;
      HealthFinding f{p.label, t.name, t.format, "", 0, static_cast<int>(t.samples.size()), 0, ""};
      std::vector<std::string> problems, advice;
      auto check = [&](auto badness, auto flagged, const std::string& what, auto show, auto advise) {
        const int n = static_cast<int>(std::count_if(t.samples.begin(), t.samples.end(), flagged));
        if (n == 0) return;
        const TensorSample& w = worst(t, badness);
        if (problems.empty()) f.step = w.step;
        problems.push_back(fmt::format("{} {} at step {}", what, show(w), w.step));
        f.flagged = std::max(f.flagged, n);
        if (std::string a = advise(w); !a.empty()) advice.push_back(std::move(a));
      };
      check([](const TensorSample& s) { return s.nonfinite; }, [](const TensorSample& s) { return s.nonfinite > 0; },
            "NaN/inf", [](const TensorSample& s) { return percent(s.nonfinite); },
            [](const TensorSample&) {
              return std::string("NaN or inf reached this FP8 cast: the run diverged there or before (the earliest "
                                 "step among the flagged tensors is nearest the cause): a lower --lr, --clip, or the "
                                 "other advice here.");
            });
      check([&](const TensorSample& s) { return clamps(t, s) ? s.saturated : -1.0; },
            [&](const TensorSample& s) { return s.saturated > th.saturation && clamps(t, s); }, "saturation",
            [](const TensorSample& s) { return percent(s.saturated); },
            [&](const TensorSample& w) { return saturation_advice(p, t, w); });
      check([](const TensorSample& s) { return s.underflow(); },
            [&](const TensorSample& s) { return s.underflow() > th.underflow; }, "underflow",
            [](const TensorSample& s) { return percent(s.underflow()); },
            [&](const TensorSample& w) { return underflow_advice(p, t, w); });
      const bool explained = !problems.empty();
      check([](const TensorSample& s) { return -snr_or_max(s); },
            [&](const TensorSample& s) { return snr_or_max(s) < th.snr_db; }, "SNR",
            [](const TensorSample& s) { return decibels(s.snr_db); },
            [&](const TensorSample&) {
              return explained ? std::string()
                               : std::string("The error is spread over the values (no end of the range stands out): "
                                             "--recipe current, or block scaling (--recipe block), fits the scale "
                                             "closer.");
            });
      if (problems.empty()) continue;
      f.problem = fmt::format("{}", fmt::join(problems, "; "));
      f.advice = fmt::format("{}", fmt::join(advice, " "));
      findings.push_back(std::move(f));
    }
  }
  return findings;
}

namespace {

void curves_section(HtmlPage& page, const RunLog& run) {
  page.heading("Training curves");
  const bool lm = run.kind == "lm";
  const std::string x = lm ? "step" : "epoch";
  auto plot = [&](const std::vector<std::pair<std::string, bool>>& curves, const std::string& title,
                  const std::string& y) {
    LinePlot plot{title, {x}, {y}, {}};
    for (const PrecisionLog& p : run.precisions) {
      for (const auto& [curve, dashed] : curves) {
        const auto it = p.curves.find(curve);
        if (it == p.curves.end() || it->second.empty()) continue;
        PlotSeries s{curves.size() > 1 ? fmt::format("{} {}", p.label, dashed ? "validation" : "training") : p.label};
        for (const auto& [cx, cy] : it->second) {
          s.x.push_back(cx);
          s.y.push_back(cy);
        }
        s.dashed = dashed;
        plot.series.push_back(std::move(s));
      }
    }
    if (!plot.series.empty()) page.plot(plot);
  };
  plot({{"loss", false}, {"val_loss", true}}, "Loss", lm ? "cross-entropy (nats)" : "binary cross-entropy");
  if (lm) {
    plot({{"val_perplexity", false}}, "Validation perplexity", "perplexity");
  } else {
    plot({{"accuracy", false}, {"val_accuracy", true}}, "Accuracy", "accuracy");
  }
  std::vector<std::string> keys;
  for (const PrecisionLog& p : run.precisions)
    for (const auto& [k, v] : p.final_metrics)
      if (std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
  CsvRow header{"precision"};
  header.insert(header.end(), keys.begin(), keys.end());
  header.push_back("status");
  std::vector<CsvRow> rows;
  std::vector<Tone> tones;
  for (const PrecisionLog& p : run.precisions) {
    CsvRow row{p.label};
    for (const std::string& k : keys) {
      const auto it = p.final_metrics.find(k);
      row.push_back(it == p.final_metrics.end() ? "" : k.find("accuracy") != std::string::npos ? percent(it->second)
                                                                                               : number(it->second));
    }
    row.push_back(p.diverged ? "diverged" : "finished");
    rows.push_back(std::move(row));
    tones.push_back(p.diverged ? Tone::Bad : Tone::Info);
  }
  page.table(header, rows, "Final metrics", tones);
}

// The length of the module path every tensor's name starts with, up to a '.' or '/' ("model.layers."),
// which plot labels leave out.
size_t common_prefix(const std::vector<TensorHistory>& tensors) {
  if (tensors.size() < 2) return 0;
  const std::string& first = tensors.front().name;
  size_t common = first.size();
  for (const TensorHistory& t : tensors)
    common = std::min<size_t>(common, std::mismatch(first.begin(), first.end(), t.name.begin(), t.name.end()).first -
                                          first.begin());
  const size_t end = common == 0 ? std::string::npos : first.find_last_of("./", common - 1);
  return end == std::string::npos ? 0 : end + 1;
}

void tensor_section(HtmlPage& page, const PrecisionLog& p, const std::vector<HealthFinding>& findings) {
  page.heading(fmt::format("FP8 tensors: {}", p.label));
  page.paragraph(fmt::format("Recipe: {}. {} quantized tensors, {} recordings (steps {} to {}).", p.recipe,
                             p.tensors.size(), p.tensors.empty() ? 0 : p.tensors.front().samples.size(),
                             p.tensors.front().samples.front().step, p.tensors.front().samples.back().step));
  auto flagged = [&](const TensorHistory& t) {
    return std::any_of(findings.begin(), findings.end(),
                       [&](const HealthFinding& f) { return f.precision == p.label && f.tensor == t.name; });
  };
  const size_t prefix = common_prefix(p.tensors);
  const std::pair<const char*, const char*> roles[] = {
      {"inputs", "Inputs"}, {"kernel", "Weights"}, {"outputs_grad", "Output gradients"}};
  for (const auto& names : roles) {
    const std::string role = names.first, title = names.second;  // plain names: the lambdas below capture them
    std::vector<const TensorHistory*> tensors;
    for (const TensorHistory& t : p.tensors)
      if (role_of(t.name) == role && !t.samples.empty()) tensors.push_back(&t);
    if (tensors.empty()) continue;
    // The tensors shown: flagged first, then the lowest SNR.
    auto min_snr = [](const TensorHistory* t) { return snr_or_max(worst(*t, [](const TensorSample& s) { return -snr_or_max(s); })); };
    std::stable_sort(tensors.begin(), tensors.end(), [&](const TensorHistory* a, const TensorHistory* b) {
      if (flagged(*a) != flagged(*b)) return flagged(*a);
      return min_snr(a) < min_snr(b);
    });
    const size_t shown = std::min(tensors.size(), kSeriesPerPlot);
    page.heading(fmt::format("{} ({} tensors)", title, tensors.size()), 3);
    const std::string note =
        shown < tensors.size()
            ? fmt::format("{} of {} tensors: the flagged ones first, then the lowest SNR; the table below lists all.",
                          shown, tensors.size())
            : std::string();
    const auto series = [&](size_t i, auto value, bool dashed) {
      const std::string& name = tensors[i]->name;
      PlotSeries s{dashed ? std::string("  its amax history's max")
                          : name.substr(prefix, name.rfind('/') - std::min(prefix, name.rfind('/')))};
      for (const TensorSample& sample : tensors[i]->samples) {
        s.x.push_back(static_cast<double>(sample.step));
        s.y.push_back(value(sample));
      }
      s.dashed = dashed;
      s.color = kColors[i];
      return s;
    };
    auto plot = [&](const std::string& what, const std::string& y, bool log, auto value) {
      LinePlot plot{fmt::format("{}: {}", title, what), {"step"}, {y, log}, {}};
      for (size_t i = 0; i < shown; ++i) {
        plot.series.push_back(series(i, value, false));
        if (what == "amax")  // below each amax in the legend, the history max its scale came from
          plot.series.push_back(series(i, [](const TensorSample& s) { return s.history_amax; }, true));
      }
      page.plot(plot, note);
    };
    plot("amax", "amax", true, [](const TensorSample& s) { return s.amax; });
    plot("scale", "scale (x * scale is cast)", true, [](const TensorSample& s) { return s.scale; });
    plot("saturated values", "% of values clamped at the format's max", false,
         [](const TensorSample& s) { return 100 * s.saturated; });
    plot("underflow (flushed to zero or subnormal)", "% of values", false,
         [](const TensorSample& s) { return 100 * s.underflow(); });
    plot("quantization SNR", "dB", false, [](const TensorSample& s) { return s.snr_db.value_or(NAN); });
  }
  std::vector<CsvRow> rows;
  std::vector<Tone> tones;
  for (const TensorHistory& t : p.tensors) {
    if (t.samples.empty()) continue;
    const TensorSample& last = t.samples.back();
    rows.push_back({t.name, t.format, number(last.amax), number(last.scale), number(last.history_amax),
                    percent(worst(t, [](const TensorSample& s) { return s.saturated; }).saturated),
                    percent(worst(t, [](const TensorSample& s) { return s.underflow(); }).underflow()),
                    decibels(worst(t, [](const TensorSample& s) { return -snr_or_max(s); }).snr_db),
                    percent(worst(t, [](const TensorSample& s) { return s.nonfinite; }).nonfinite)});
    tones.push_back(flagged(t) ? Tone::Warn : Tone::Info);
  }
  page.table({"tensor", "format", "amax (last)", "scale (last)", "history max (last)", "max saturated",
              "max underflow", "min SNR", "max NaN/inf"},
             rows, "Every FP8 tensor over all recordings (flagged rows highlighted)", tones);
}

}  // namespace

HtmlPage health_report(const RunLog& run, const HealthThresholds& th) {
  HtmlPage page(fmt::format("FP8 health report: {}", run.dir.string()));
  const std::vector<HealthFinding> findings = diagnose(run, th);
  const bool recorded = std::any_of(run.precisions.begin(), run.precisions.end(),
                                    [](const PrecisionLog& p) { return !p.tensors.empty(); });
  size_t tensors = 0;
  for (const PrecisionLog& p : run.precisions) tensors += p.tensors.size();

  page.heading("Summary");
  page.paragraph(fmt::format(
      "A tensor is flagged when, at any recorded step, more than {} of its values saturate (clamped at the format's "
      "max, the largest past the format's rounding step there), more than {} underflow (flushed to zero or subnormal), its quantization SNR (10 log10(sum x^2 / sum "
      "(x - dequant(quant(x)))^2)) falls below {:g} dB, or it holds a NaN or inf.",
      percent(th.saturation), percent(th.underflow), th.snr_db));
  if (!recorded) {
    page.callout("No FP8 health statistics in this run. They are recorded by FP8 training with per-tensor scales "
                 "(--recipe delayed or current; block scaling keeps no per-tensor state) every --health-every N "
                 "steps and at the last (the defaults: 50 for fp8kit lm train, 100 for fp8kit train; 0 turns them off).",
                 Tone::Info);
  } else if (findings.empty()) {
    page.callout(fmt::format("All healthy: none of the {} FP8 tensors passed a threshold at any recorded step.", tensors),
                 Tone::Good);
  } else {
    page.callout(fmt::format("{} of {} FP8 tensors flagged.", findings.size(), tensors), Tone::Warn);
    std::vector<CsvRow> rows;
    for (const HealthFinding& f : findings)
      rows.push_back({f.precision, f.tensor, f.format, f.problem, fmt::format("{} of {}", f.flagged, f.recordings),
                      f.advice});
    page.table({"precision", "tensor", "format", "worst", "recordings flagged", "what would help"}, rows,
               "Flagged tensors", std::vector<Tone>(rows.size(), Tone::Warn));
  }
  for (const PrecisionLog& p : run.precisions)
    if (p.diverged) page.callout(fmt::format("{} diverged (a non-finite loss).", p.label), Tone::Bad);

  curves_section(page, run);
  for (const PrecisionLog& p : run.precisions)
    if (!p.tensors.empty() && !p.tensors.front().samples.empty()) tensor_section(page, p, findings);
  if (!run.notes.empty()) {
    page.heading("Notes");
    for (const std::string& note : run.notes) page.paragraph(note);
  }
  return page;
}

}  // namespace fp8kit::report
