// `fp8kit lab` Parts 2 and 3 on the CPU at tiny sizes: the CSV files' columns and rows, the page's
// sections, bf16 and FP8 training ending close, and real FP8 inference within a few percent of bf16.
#include "lab/lab.h"

#include "common/error_of.h"
#include "common/temp_dir.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace fp8kit::lab {
namespace {

using ::testing::HasSubstr;

// A CSV file as rows of cells (no quoted cells in these files).
std::vector<std::vector<std::string>> read_csv(const std::filesystem::path& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  std::vector<std::vector<std::string>> rows;
  for (std::string line; std::getline(in, line);) {
    std::vector<std::string> cells;
    std::stringstream s(line);
    for (std::string cell; std::getline(s, cell, ',');) cells.push_back(cell);
    if (!line.empty() && line.back() == ',') cells.emplace_back();
    rows.push_back(cells);
  }
  return rows;
}

LabOptions tiny(const testing::TempDir& dir) {
  return {.device = Device::Cpu, .out = dir.path(), .train_batches = {8, 4}, .infer_batches = {8},
          .warmup_steps = 1, .timed_steps = 3, .seed = 7};
}

TEST(LabMlp, TrainingPartWritesItsTablesAndSections) {
  const testing::TempDir dir("lab_training");
  report::HtmlPage page("lab");
  training_part(page, tiny(dir));
  const auto runs = read_csv(dir / "lab_training.csv");
  ASSERT_EQ(runs.size(), 5u);  // header + (4, 8) x (bf16, fp8), sorted by rows
  EXPECT_EQ(runs[0], (std::vector<std::string>{"batch", "precision", "warmup_steps", "timed_steps", "ms_per_step",
                                               "steps_per_second", "final_loss", "mean_loss", "speedup_vs_bf16",
                                               "final_loss_difference"}));
  EXPECT_EQ(runs[1][8], "");  // bf16 is the reference
  EXPECT_GT(std::stod(runs[2][8]), 0.0);
  EXPECT_EQ(runs[1][0], "4");
  EXPECT_EQ(runs[1][1], "bf16");
  EXPECT_EQ(runs[2][1], "fp8");
  EXPECT_EQ(runs[4][0], "8");
  for (size_t r = 1; r < runs.size(); ++r) {
    EXPECT_EQ(runs[r][3], "3");
    EXPECT_GT(std::stod(runs[r][4]), 0.0);
  }
  // Same weights and data: bf16 and FP8 end within 1% of each other (the lab's bound).
  const double bf16 = std::stod(runs[3][6]), fp8 = std::stod(runs[4][6]);
  EXPECT_NEAR(fp8, bf16, 0.01 * bf16);
  const auto curve = read_csv(dir / "lab_training_losses.csv");
  ASSERT_EQ(curve.size(), 4u);  // header + 3 timed steps, at the smallest size (no 32 here)
  EXPECT_EQ(curve[1][1], "4");
  const std::string html = page.render();
  EXPECT_THAT(html, HasSubstr("Part 2: FP8 training"));
  EXPECT_THAT(html, HasSubstr("1.5-2x speedup"));
  EXPECT_THAT(html, HasSubstr("On the CPU FP8 is emulated"));
  EXPECT_THAT(html, HasSubstr("<svg"));
}

TEST(LabMlp, InferencePartComparesRealFp8WithBf16) {
  const testing::TempDir dir("lab_inference");
  report::HtmlPage page("lab");
  inference_part(page, tiny(dir));
  const auto rows = read_csv(dir / "lab_inference.csv");
  ASSERT_EQ(rows.size(), 4u);  // header + bf16, fp8, the lab's simulation
  EXPECT_EQ(rows[0], (std::vector<std::string>{"batch", "precision", "ms_per_inference", "inferences_per_second",
                                               "rows_per_second", "mean_abs_diff", "max_abs_diff",
                                               "relative_error_pct"}));
  EXPECT_EQ(rows[2][1], "fp8");
  EXPECT_EQ(rows[3][1], "lab_simulated_fp8_weights");
  const double fp8_error = std::stod(rows[2][7]), simulated_error = std::stod(rows[3][7]);
  EXPECT_GT(fp8_error, 0.0);
  EXPECT_LT(fp8_error, 8.0);  // percent: E4M3 rounds each value by ~2%, weights and activations of two layers
  EXPECT_LT(simulated_error, fp8_error);  // the simulation rounds the weights only
  EXPECT_GT(std::stod(rows[2][4]), 0.0);
  const std::string html = page.render();
  EXPECT_THAT(html, HasSubstr("Part 3: FP8 inference"));
  EXPECT_THAT(html, HasSubstr("about 2x faster"));
}

TEST(LabMlp, BadOptionsAreErrors) {
  const testing::TempDir dir("lab_bad");
  report::HtmlPage page("lab");
  LabOptions o = tiny(dir);
  o.timed_steps = 0;
  EXPECT_THAT(testing::error_of([&] { training_part(page, o); }), HasSubstr("timed steps >= 1, got 1 and 0"));
  o = tiny(dir);
  o.train_batches = {0};
  EXPECT_THAT(testing::error_of([&] { training_part(page, o); }), HasSubstr("lab: batch sizes must be >= 1, got 0"));
}

}  // namespace
}  // namespace fp8kit::lab
