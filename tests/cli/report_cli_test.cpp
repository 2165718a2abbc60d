// `fp8kit report` end to end: a tiny FP8 LM run trained here with health recording gets a page with
// its curves and every FP8 tensor's table; a missing directory and a corrupt log are one-line errors.
#include "cli/run_cli.h"
#include "common/read_text.h"
#include "common/temp_dir.h"
#include "train/lm_trainer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <random>

namespace fp8kit {
namespace {

using ::testing::HasSubstr;
using testing::run_cli;
using testing::read_text;

TEST(ReportCli, PageOfATinyFp8Run) {
  testing::TempDir dir("report_cli");
  {
    train::MetricsLog log(dir / "run" / "metrics.jsonl", false);
    train::LmTrainOptions o;
    o.model = models::llama_preset("tiny", 23);
    o.model.hidden_size = 32;
    o.model.intermediate_size = 64;
    o.model.head_dim = 8;
    o.model.max_position_embeddings = 32;
    o.precision = nn::Precision::Fp8;
    o.seq = 16;
    o.batch = 2;
    o.steps = 4;
    o.eval_every = 2;
    o.eval_batches = 1;
    o.health_every = 2;
    o.metrics = &log;
    o.console = nullptr;
    std::mt19937 rng(5);
    std::vector<int32_t> stream(1500);
    for (int32_t& t : stream) t = static_cast<int32_t>(rng() % 23);
    train::train_lm(o, stream, stream);
  }
  const auto r = run_cli("report " + (dir / "run").string() + " --out " + (dir / "page" / "report.html").string());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("Report: "));
  const std::string html = read_text(dir / "page" / "report.html");
  EXPECT_THAT(html, HasSubstr("Training curves"));
  EXPECT_THAT(html, HasSubstr("Validation perplexity"));
  EXPECT_THAT(html, HasSubstr("FP8 tensors: fp8"));
  EXPECT_THAT(html, HasSubstr("model.layers.1.mlp.down_proj/outputs_grad"));
  EXPECT_THAT(html, HasSubstr("Output gradients: quantization SNR"));

  // The default page lands in the run directory.
  ASSERT_EQ(run_cli("report " + (dir / "run").string()).exit_code, 0);
  EXPECT_TRUE(std::filesystem::exists(dir / "run" / "report.html"));
}

TEST(ReportCli, BadInputIsOneLine) {
  testing::TempDir dir("report_cli_errors");
  auto r = run_cli("report " + (dir / "nowhere").string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("error: "));
  EXPECT_THAT(r.output, HasSubstr("nowhere does not exist"));
  EXPECT_EQ(std::count(r.output.begin(), r.output.end(), '\n'), 1) << r.output;

  std::filesystem::create_directories(dir / "empty");
  r = run_cli("report " + (dir / "empty").string());
  EXPECT_EQ(r.output, "error: " + (dir / "empty").string() +
                          " holds no metrics.jsonl (nor do its subdirectories): give the --out directory of fp8kit "
                          "train or fp8kit lm train\n");

  std::ofstream(dir / "empty" / "metrics.jsonl").flush();
  r = run_cli("report " + (dir / "empty").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.output, "error: " + (dir / "empty" / "metrics.jsonl").string() + " holds no training events yet (an "
                          "empty log, or a run stopped before its first epoch or step): nothing to report until the "
                          "run has trained\n");
  EXPECT_FALSE(std::filesystem::exists(dir / "empty" / "report.html"));

  std::ofstream(dir / "empty" / "metrics.jsonl") << "{\"event\": \"epoch\", \"precision\": \"fp8\", \"epoch\": 1}\n";
  r = run_cli("report " + (dir / "empty").string() + " --out " + dir.path().string());
  EXPECT_EQ(r.output, "error: --out " + dir.path().string() + " is a directory: give the HTML file to write, e.g. " +
                          (dir / "report.html").string() + "\n");

  std::filesystem::create_directories(dir / "folder" / "metrics.jsonl");
  r = run_cli("report " + (dir / "folder").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("metrics.jsonl is a directory, not a metrics log"));
  EXPECT_TRUE(testing::one_error_line(r.output)) << r.output;
  std::filesystem::remove_all(dir / "folder");

  std::ofstream(dir / "metrics.jsonl") << "{\"event\": \"run\"}\nnot json\n";
  r = run_cli("report " + dir.path().string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("metrics.jsonl:2: not a JSON object"));
}

}  // namespace
}  // namespace fp8kit
