// `fp8kit formats`: the table carries the spec's constants for both formats and the 16-bit comparisons.
#include "cli/run_cli.h"

#include <gtest/gtest.h>

namespace fp8kit {
namespace {

using testing::run_cli;

std::string row(const std::string& output, const std::string& label) {
  const size_t at = output.find("\n" + label);
  if (at == std::string::npos) return "";
  return output.substr(at + 1, output.find('\n', at + 1) - at - 1);
}

TEST(FormatsCli, Table) {
  const auto r = run_cli("formats");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output.substr(0, r.output.find('\n')).find("e4m3") != std::string::npos, true);
  for (const char* name : {"e4m3", "e5m2", "bf16", "fp16"}) EXPECT_NE(r.output.find(name), std::string::npos);
  const std::string max = row(r.output, "max finite");
  for (const char* v : {"448", "57344", "3.3895314e+38", "65504"}) EXPECT_NE(max.find(v), std::string::npos) << max;
  const std::string bias = row(r.output, "exponent bias");
  for (const char* v : {"7", "15", "127"}) EXPECT_NE(bias.find(v), std::string::npos) << bias;
  EXPECT_NE(row(r.output, "min normal").find("2^-6"), std::string::npos);
  EXPECT_NE(row(r.output, "min normal").find("2^-14"), std::string::npos);
  EXPECT_NE(row(r.output, "min subnormal").find("2^-9"), std::string::npos);
  EXPECT_NE(row(r.output, "min subnormal").find("2^-16"), std::string::npos);
  EXPECT_NE(row(r.output, "range, decades").find("5.36"), std::string::npos);  // log10(448 / 2^-9)
  EXPECT_NE(row(r.output, "range, decades").find("9.57"), std::string::npos);  // log10(57344 / 2^-16)
  const std::string values = row(r.output, "values in [1, 2)");
  EXPECT_NE(values.find(" 8 "), std::string::npos) << values;
  EXPECT_NE(values.find(" 4 "), std::string::npos) << values;
  EXPECT_NE(row(r.output, "infinity").find("none"), std::string::npos);
  EXPECT_NE(row(r.output, "NaN").find("0x7F, 0xFF"), std::string::npos);
}

TEST(FormatsCli, HelpAndBadArguments) {
  EXPECT_EQ(run_cli("formats --help").exit_code, 0);
  const auto r = run_cli("formats extra");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(r.output.rfind("error: ", 0), 0u) << r.output;
}

}  // namespace
}  // namespace fp8kit
