// The lab's parts (lab/lab.h) one at a time: each adds its sections to the page and writes the CSV files
// it links.
#include "lab/lab.h"

#include "common/read_text.h"
#include "common/temp_dir.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <regex>
#include <sstream>

namespace fp8kit::lab {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;
using testing::read_text;

// Renders the part alone and checks its headings, and that every linked CSV file exists with a header
// and at least one row. Returns the page.
std::string run_part(void (*part)(report::HtmlPage&, const LabOptions&), const TempDir& dir,
                     const std::vector<std::string>& headings, size_t min_csv_files) {
  const LabOptions options{.out = dir.path(), .train_batches = {8}, .infer_batches = {8}, .warmup_steps = 1,
                           .timed_steps = 2};
  report::HtmlPage page("test");
  part(page, options);
  const std::string html = page.render();
  for (const std::string& h : headings) EXPECT_NE(html.find(h), std::string::npos) << h;
  EXPECT_EQ(html.find("<script"), std::string::npos);
  size_t links = 0;
  const std::regex href("href=\"([^\"#]+\\.csv)\"");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), href); it != std::sregex_iterator(); ++it, ++links) {
    const std::string csv = read_text(dir / (*it)[1].str());
    EXPECT_GE(std::count(csv.begin(), csv.end(), '\n'), 2) << (*it)[1];
  }
  EXPECT_GE(links, min_csv_files);
  return html;
}

TEST(LabParts, Formats) {
  const TempDir dir("lab_formats");
  const std::string html = run_part(formats_part, dir, {"Part 1", "Precision by magnitude", "<svg"}, 3);
  EXPECT_EQ(read_text(dir / "part1_formats.csv").substr(0, 24), "property,e4m3,e5m2,bf16,");
  // E4M3 at its max: the step below it is 32 / 448.
  EXPECT_NE(read_text(dir / "part1_typical_magnitudes.csv").find("448,E4M3's max finite,the max (step below it 7.14%)"),
            std::string::npos);
}

TEST(LabParts, DelayedScalingAndExercise1) {
  const TempDir dir("lab_delayed");
  const std::string html =
      run_part(delayed_scaling_part, dir, {"Part 4", "Exercise 1", "std x1.5 per step", "std x0.7 per step"}, 3);
  const std::string steps = read_text(dir / "exercise1_history_steps.csv");
  for (const char* method : {"max of 4", "max of 8", "max of 16", "max of 32"}) {
    EXPECT_NE(steps.find(std::string("decay,\"delayed, ") + method + "\",39,"), std::string::npos) << method;
  }
  EXPECT_EQ(read_text(dir / "part4_delayed_scaling.csv").substr(0, 15), "step,tensor max");
}

TEST(LabParts, GradientFormatsFindWhereE5m2Wins) {
  const TempDir dir("lab_gradients");
  const std::string html = run_part(gradient_formats_part, dir, {"Exercise 2", "Which is better for gradients?"}, 2);
  // The widest spread (last row): E4M3 flushes most small gradients, E5M2 far fewer.
  std::stringstream rows(read_text(dir / "exercise2_dynamic_range.csv"));
  std::string line, last;
  while (std::getline(rows, line)) last = line;
  std::vector<std::string> cells;
  std::stringstream cell_stream(last);
  for (std::string cell; std::getline(cell_stream, cell, ',');) cells.push_back(cell);
  ASSERT_EQ(cells.size(), 8u) << last;
  EXPECT_GT(std::stod(cells[6]), 2 * std::stod(cells[7])) << last;  // flushed %: e4m3 vs e5m2
  EXPECT_NE(html.find("E5M2 has the lower element error"), std::string::npos);
}

TEST(LabParts, SimulatedFp8ShowsWhereTheSimulationIsWrong) {
  const TempDir dir("lab_simulated");
  run_part(simulated_fp8_part, dir, {"Simulated FP8 against real FP8", "too optimistic", "too pessimistic"}, 4);
  const std::string values = read_text(dir / "simulated_fp8_values.csv");
  EXPECT_NE(values.find("\n0.3,e4m3,0.3125,0.25,no\n"), std::string::npos) << values;
  EXPECT_NE(values.find("\n1.3,e4m3,1.25,1.25,yes\n"), std::string::npos) << values;
}

TEST(LabParts, CommonMistakes) {
  const TempDir dir("lab_mistakes");
  run_part(common_mistakes_part, dir, {"Mistake 1", "Mistake 2", "Mistake 3"}, 1);
  EXPECT_EQ(read_text(dir / "common_mistakes.csv").substr(0, 12), "mistake,way,");
}

}  // namespace
}  // namespace fp8kit::lab
