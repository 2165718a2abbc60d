// `fp8kit lab`: the whole page end to end at --quick sizes, and its input errors.
#include "cli/run_cli.h"
#include "common/read_text.h"
#include "common/temp_dir.h"
#include "runtime/device.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

namespace fp8kit {
namespace {

using testing::run_cli;
using testing::one_error_line;
using testing::read_text;
namespace fs = std::filesystem;

TEST(LabCli, QuickRunWritesTheWholePage) {
  const testing::TempDir dir("lab_cli");
  const fs::path out = dir / "nested" / "lab";
  const auto r = run_cli("lab --quick --device cpu --out '" + out.string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find((out / "index.html").string()), std::string::npos) << r.output;
  const std::string html = read_text(out / "index.html");
  for (const char* heading : {"Part 1", "Part 2", "Part 3", "Part 4", "Exercise 1", "Exercise 2",
                              "Simulated FP8 against real FP8", "Common mistakes", "fp8kit", "This run"}) {
    EXPECT_NE(html.find(heading), std::string::npos) << heading;
  }
  EXPECT_EQ(html.find("<script"), std::string::npos);
  // Nothing fetched: the only URL is the SVG namespace.
  for (size_t at = html.find("http"); at != std::string::npos; at = html.find("http", at + 1)) {
    EXPECT_EQ(html.compare(at, 26, "http://www.w3.org/2000/svg"), 0) << html.substr(at, 60);
  }
  size_t csv_links = 0;
  const std::regex href("href=\"([^\"#]+)\"");
  for (auto it = std::sregex_iterator(html.begin(), html.end(), href); it != std::sregex_iterator(); ++it) {
    EXPECT_TRUE(fs::is_regular_file(out / (*it)[1].str())) << (*it)[1];
    csv_links += (*it)[1].str().ends_with(".csv");
  }
  EXPECT_GE(csv_links, 12u);
  EXPECT_NE(read_text(out / "run.csv").find("\nfp8kit,"), std::string::npos);
}

TEST(LabCli, BadInputIsOneErrorLine) {
  const testing::TempDir dir("lab_cli_bad");
  const fs::path file = dir / "not_a_dir";
  std::ofstream(file) << "x";
  for (const fs::path& out : {file, file / "sub"}) {
    const auto r = run_cli("lab --quick --device cpu --out '" + out.string() + "'");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(one_error_line(r.output)) << r.output;
    EXPECT_NE(r.output.find("--out"), std::string::npos) << r.output;
  }
  if (!cuda_available()) {
    const auto r = run_cli("lab --quick --device cuda --out '" + (dir / "gpu").string() + "'");
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_TRUE(one_error_line(r.output)) << r.output;
    EXPECT_EQ(r.output.rfind("error: --device cuda: ", 0), 0u) << r.output;
    EXPECT_FALSE(fs::exists(dir / "gpu"));  // refused before anything is written
  }
  auto r = run_cli("lab --device tpu");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output.rfind("error: ", 0), 0u) << r.output;
  r = run_cli("lab --train-batches 0");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_EQ(r.output.rfind("error: ", 0), 0u) << r.output;
  EXPECT_EQ(run_cli("lab --help").exit_code, 0);
}

}  // namespace
}  // namespace fp8kit
