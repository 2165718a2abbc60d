// `fp8kit quant-error`: the three reports on stdout, and with --out the CSV files and SVG plots.
#include "cli/run_cli.h"
#include "common/read_text.h"
#include "common/temp_dir.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

namespace fp8kit {
namespace {

using testing::run_cli;
using testing::read_text;
namespace fs = std::filesystem;

TEST(QuantErrorCli, TablesCsvAndPlots) {
  const testing::TempDir dir("quant_error_cli");
  const auto r = run_cli("quant-error --steps 20 --out '" + (dir / "nested").string() + "'");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (const char* section : {"sample tensors", "against magnitude", "Lab Part 4", "Delayed scaling over 20 steps",
                              "delayed, max of 4", "delayed, max of 32"}) {
    EXPECT_NE(r.output.find(section), std::string::npos) << section;
  }
  const fs::path out = dir / "nested";
  EXPECT_EQ(read_text(out / "sample_tensors.csv").substr(0, 23), "tensor,format,scaling,e");
  EXPECT_EQ(read_text(out / "relative_error.csv").substr(0, 20), "magnitude,e4m3,e5m2,");
  const std::string steps = read_text(out / "delayed_scaling.csv");
  EXPECT_NE(steps.find("decay,\"delayed, max of 16\",19,"), std::string::npos);
  EXPECT_FALSE(read_text(out / "delayed_scaling_summary.csv").empty());
  for (const char* plot : {"relative_error.svg", "delayed_linear_growth.svg", "delayed_fast_growth.svg",
                           "delayed_spike.svg", "delayed_decay.svg"}) {
    const std::string svg = read_text(out / plot);
    EXPECT_EQ(svg.rfind("<svg", 0), 0u) << plot;
    EXPECT_NE(svg.find("<polyline"), std::string::npos) << plot;
    EXPECT_NE(svg.find("</svg>"), std::string::npos) << plot;
  }
}

// The largest --steps keeps every scenario's tensors inside float32's range: no inf or NaN in the
// tables (310 steps used to end in "FP8 quantization multiplier must be finite and > 0, got 0").
TEST(QuantErrorCli, MostStepsStayFinite) {
  const auto r = run_cli("quant-error --steps 200");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.find("nan"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("inf"), std::string::npos) << r.output;
}

TEST(QuantErrorCli, SameSeedSameNumbers) {
  EXPECT_EQ(run_cli("quant-error --steps 5 --seed 3").output, run_cli("quant-error --steps 5 --seed 3").output);
}

TEST(QuantErrorCli, BadArguments) {
  auto r = run_cli("quant-error --steps 0");
  EXPECT_EQ(r.exit_code, 2);  // a usage error, found while parsing (options_cli_test.cpp has the rest)
  EXPECT_EQ(r.output.rfind("error: ", 0), 0u) << r.output;
  const testing::TempDir dir("quant_error_cli_bad");
  const fs::path file = dir / "not_a_dir";
  std::ofstream(file) << "x";
  r = run_cli("quant-error --out '" + file.string() + "'");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(r.output.rfind("error: ", 0), 0u) << r.output;
  EXPECT_EQ(run_cli("quant-error --help").exit_code, 0);
}

}  // namespace
}  // namespace fp8kit
