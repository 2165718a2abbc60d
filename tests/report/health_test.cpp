// The health report on synthetic metrics logs: a saturating tensor is flagged with the margin it
// needed, underflow under an old peak with a shorter history, E4M3 gradients with E5M2, NaN with the
// divergence; a healthy run says so; a run without health events still gets its curves and a note;
// several run directories under one folder; the errors name the file and line.
#include "report/health.h"

#include "base/error.h"
#include "common/error_of.h"
#include "common/temp_dir.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <vector>

namespace fp8kit::report {
namespace {

using ::testing::HasSubstr;
using nlohmann::json;

struct Slot {
  std::string name, format;
  double amax, scale, history, saturated = 0, flushed = 0, subnormal = 0, nonfinite = 0;
  json snr = 30.0;
};

json health(int step, const std::vector<Slot>& slots, const std::string& mode = "delayed") {
  json e = {{"event", "health"}, {"precision", "fp8"}, {"step", step}, {"recipe", mode + " scaling"},
            {"scaling", {{"mode", mode}, {"lag", "te"}, {"amax_history", 1024}, {"amax_algo", "max"}, {"margin", 0}}}};
  for (const char* key : {"tensors", "format", "count", "amax", "scale", "history_amax", "saturated", "flushed",
                          "subnormal", "nonfinite", "snr_db"})
    e[key] = json::array();
  for (const Slot& s : slots) {
    e["tensors"].push_back(s.name);
    e["format"].push_back(s.format);
    e["count"].push_back(4096);
    e["amax"].push_back(s.amax);
    e["scale"].push_back(s.scale);
    e["history_amax"].push_back(s.history);
    e["saturated"].push_back(s.saturated);
    e["flushed"].push_back(s.flushed);
    e["subnormal"].push_back(s.subnormal);
    e["nonfinite"].push_back(s.nonfinite);
    e["snr_db"].push_back(s.snr);
  }
  return e;
}

void write_log(const std::filesystem::path& file, const std::vector<json>& events) {
  std::filesystem::create_directories(file.parent_path());
  std::ofstream out(file);
  for (const json& e : events) out << e.dump() << '\n';
}

std::vector<json> lm_run(const std::vector<json>& health_events) {
  std::vector<json> events = {{{"event", "run"}, {"model", "llama"}, {"precision", "fp8"}, {"recipe", "delayed"}}};
  for (int step = 1; step <= 4; ++step)
    events.push_back({{"event", "step"}, {"precision", "fp8"}, {"step", step}, {"loss", 5.0 - step}});
  events.push_back({{"event", "validation"}, {"precision", "fp8"}, {"step", 4}, {"loss", 1.5}, {"perplexity", 4.48}});
  events.insert(events.end(), health_events.begin(), health_events.end());
  return events;
}

const Slot kHealthy{"model.layers.0.mlp.down_proj/inputs", "e4m3", 3.0, 149.0, 3.0};

TEST(HealthReport, SaturationIsFlaggedWithTheMarginItNeeded) {
  testing::TempDir dir("health_saturation");
  Slot growing{"model.layers.0.mlp.up_proj/inputs", "e4m3", 900.0, 1.12, 400.0, 0.005};
  Slot calm = growing;
  calm.amax = 390.0, calm.saturated = 0.0;
  write_log(dir / "metrics.jsonl", lm_run({health(2, {calm, kHealthy}), health(4, {growing, kHealthy})}));
  const RunLog run = read_run_log(dir.path());
  ASSERT_EQ(run.precisions.size(), 1u);
  EXPECT_EQ(run.kind, "lm");
  ASSERT_EQ(run.precisions[0].tensors.size(), 2u);
  EXPECT_EQ(run.precisions[0].tensors[0].samples.size(), 2u);

  const std::vector<HealthFinding> findings = diagnose(run);
  ASSERT_EQ(findings.size(), 1u);
  EXPECT_EQ(findings[0].tensor, "model.layers.0.mlp.up_proj/inputs");
  EXPECT_EQ(findings[0].step, 4);
  EXPECT_EQ(findings[0].flagged, 1);
  EXPECT_EQ(findings[0].recordings, 2);
  EXPECT_THAT(findings[0].problem, HasSubstr("saturation 0.5%"));
  EXPECT_THAT(findings[0].advice, HasSubstr("--margin 2"));  // 900 / 400: 2^2 headroom
  EXPECT_THAT(findings[0].advice, HasSubstr("--recipe current"));

  const std::string html = health_report(run).render();
  EXPECT_THAT(html, HasSubstr("1 of 2 FP8 tensors flagged"));
  EXPECT_THAT(html, HasSubstr("<caption>Flagged tensors</caption>"));
  EXPECT_THAT(html, HasSubstr("Training curves"));
  EXPECT_THAT(html, HasSubstr("Validation perplexity"));
  EXPECT_THAT(html, HasSubstr("FP8 tensors: fp8"));
  EXPECT_THAT(html, HasSubstr("Inputs: saturated values"));
  EXPECT_THAT(html, HasSubstr("model.layers.0.mlp.down_proj/inputs"));
  EXPECT_EQ(html.find("<script"), std::string::npos);

  // A looser threshold lets it pass.
  EXPECT_TRUE(diagnose(run, {.saturation = 0.01}).empty());
}

TEST(HealthReport, ValuesThatRoundToTheMaxAnywayAreNotFlagged) {
  testing::TempDir dir("health_rounding");
  // The weight grew 0.1% past the history's max: amax * scale = 448.4, which rounds to 448 unclamped.
  const Slot drift{"model.layers.0.mlp.up_proj/kernel", "e4m3", 0.0775, 5780.0, 0.0774, 0.0002};
  write_log(dir / "metrics.jsonl", lm_run({health(2, {drift})}));
  EXPECT_TRUE(diagnose(read_run_log(dir.path())).empty());
}

TEST(HealthReport, UnderflowUnderAnOldPeakAsksForAShorterHistory) {
  testing::TempDir dir("health_underflow");
  const Slot stale{"model.layers.1.self_attn.o_proj/outputs_grad", "e5m2", 1e-6, 5.7e5, 1e-1, 0, 0.2, 0.1};
  write_log(dir / "metrics.jsonl", lm_run({health(2, {stale})}));
  const std::vector<HealthFinding> f = diagnose(read_run_log(dir.path()));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_THAT(f[0].problem, HasSubstr("underflow 30%"));
  EXPECT_THAT(f[0].advice, HasSubstr("--amax-history"));
  EXPECT_THAT(f[0].advice, HasSubstr("100000x"));
}

TEST(HealthReport, E4M3GradientsAreSentToE5M2) {
  testing::TempDir dir("health_e4m3_grad");
  const Slot grad{"dense/outputs_grad", "e4m3", 1e-3, 4.4e5, 1e-3, 0, 0.05, 0.02, 0, 12.0};
  write_log(dir / "metrics.jsonl", lm_run({health(2, {grad}, "current")}));
  const std::vector<HealthFinding> f = diagnose(read_run_log(dir.path()));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_THAT(f[0].problem, HasSubstr("underflow"));
  EXPECT_THAT(f[0].problem, HasSubstr("SNR 12.0 dB"));
  EXPECT_THAT(f[0].advice, HasSubstr("--formats hybrid"));
  EXPECT_THAT(f[0].advice, HasSubstr("--recipe block"));
}

TEST(HealthReport, NanIsFlagged) {
  testing::TempDir dir("health_nan");
  Slot bad = kHealthy;
  bad.nonfinite = 0.25;
  write_log(dir / "metrics.jsonl", lm_run({health(2, {bad})}));
  const std::vector<HealthFinding> f = diagnose(read_run_log(dir.path()));
  ASSERT_EQ(f.size(), 1u);
  EXPECT_THAT(f[0].problem, HasSubstr("NaN/inf 25%"));
  EXPECT_THAT(f[0].advice, HasSubstr("diverged"));
}

TEST(HealthReport, AHealthyRunSaysSo) {
  testing::TempDir dir("health_ok");
  write_log(dir / "metrics.jsonl", lm_run({health(2, {kHealthy}), health(4, {kHealthy})}));
  const std::string html = health_report(read_run_log(dir.path())).render();
  EXPECT_THAT(html, HasSubstr("All healthy"));
  EXPECT_EQ(html.find("Flagged tensors"), std::string::npos);
}

TEST(HealthReport, ARunWithoutHealthEventsGetsItsCurvesAndANote) {
  testing::TempDir dir("health_none");
  std::vector<json> events = {{{"event", "run"}, {"precisions", {"bf16", "fp8"}}, {"recipe", "delayed"}}};
  for (const char* p : {"bf16", "fp8"}) {
    for (int epoch = 1; epoch <= 3; ++epoch)
      events.push_back({{"event", "epoch"}, {"precision", p}, {"epoch", epoch}, {"loss", 0.7 - 0.1 * epoch},
                        {"accuracy", 0.5 + 0.1 * epoch}, {"val_loss", 0.65}, {"val_accuracy", 0.7}});
    events.push_back({{"event", "test"}, {"precision", p}, {"accuracy", 0.81}, {"loss", 0.45}});
  }
  write_log(dir / "metrics.jsonl", events);
  const RunLog run = read_run_log(dir.path());
  EXPECT_EQ(run.kind, "classifier");
  ASSERT_EQ(run.precisions.size(), 2u);
  EXPECT_EQ(run.precisions[1].curves.at("accuracy").size(), 3u);
  const std::string html = health_report(run).render();
  EXPECT_THAT(html, HasSubstr("No FP8 health statistics"));
  EXPECT_THAT(html, HasSubstr("--health-every"));
  EXPECT_THAT(html, HasSubstr(">Accuracy<"));
  EXPECT_THAT(html, HasSubstr("bf16 training"));
  EXPECT_THAT(html, HasSubstr("fp8 validation"));
  EXPECT_THAT(html, HasSubstr("81%"));  // the test accuracy
}

TEST(HealthReport, ReadsEveryRunUnderAFolder) {
  testing::TempDir dir("health_folder");
  write_log(dir / "lm-fp8" / "metrics.jsonl", lm_run({health(2, {kHealthy})}));
  std::vector<json> bf16 = lm_run({});
  for (json& e : bf16)
    if (e.contains("precision")) e["precision"] = "bf16";
  write_log(dir / "lm-bf16" / "metrics.jsonl", bf16);
  const RunLog run = read_run_log(dir.path());
  ASSERT_EQ(run.precisions.size(), 2u);
  EXPECT_EQ(run.precisions[0].label, "bf16 (lm-bf16)");
  EXPECT_EQ(run.precisions[1].label, "fp8 (lm-fp8)");
}

TEST(HealthReport, ErrorsNameTheFileAndLine) {
  testing::TempDir dir("health_errors");
  EXPECT_THAT(testing::error_of([&] { read_run_log(dir / "missing"); }), HasSubstr("missing does not exist"));
  EXPECT_THAT(testing::error_of([&] { read_run_log(dir.path()); }), HasSubstr("holds no metrics.jsonl"));

  const std::filesystem::path log = dir / "metrics.jsonl";
  // Nothing to draw: an empty log, or only the run line of a run stopped before its first epoch.
  for (const std::vector<json>& events : {std::vector<json>{}, std::vector<json>{json{{"event", "run"}}}}) {
    write_log(log, events);
    EXPECT_EQ(testing::error_of([&] { read_run_log(dir.path()); }),
              log.string() + " holds no training events yet (an empty log, or a run stopped before its first epoch "
                             "or step): nothing to report until the run has trained");
  }
  {
    std::ofstream out(log);
    out << json{{"event", "run"}}.dump() << "\n\n{\"event\": \"step\", \"loss\n" << json{{"event", "x"}}.dump() << "\n";
  }
  EXPECT_THAT(testing::error_of([&] { read_run_log(dir.path()); }), HasSubstr("metrics.jsonl:3: not a JSON object"));
  {
    std::ofstream out(log);
    out << json{{"event", "step"}, {"precision", "fp8"}, {"step", 1}, {"loss", "low"}}.dump() << "\n";
  }
  EXPECT_THAT(testing::error_of([&] { read_run_log(dir.path()); }),
              HasSubstr("metrics.jsonl:1: \"loss\" must be a number"));
  {
    std::ofstream out(log);
    json bad = health(2, {kHealthy});
    bad["amax"] = json::array();
    out << bad.dump() << "\n";
  }
  EXPECT_THAT(testing::error_of([&] { read_run_log(dir.path()); }), HasSubstr("\"amax\" must be an array of 1"));
}

TEST(HealthReport, AnUnfinishedLastLineIsSkippedWithANote) {
  testing::TempDir dir("health_cut");
  write_log(dir / "metrics.jsonl", lm_run({}));
  {
    std::ofstream out(dir / "metrics.jsonl", std::ios::app);
    out << "{\"event\": \"step\", \"prec";
  }
  const RunLog run = read_run_log(dir.path());
  ASSERT_EQ(run.notes.size(), 1u);
  EXPECT_THAT(run.notes[0], HasSubstr("metrics.jsonl:7: an unfinished last line"));
  EXPECT_EQ(run.precisions.at(0).curves.at("loss").size(), 4u);
}

}  // namespace
}  // namespace fp8kit::report
