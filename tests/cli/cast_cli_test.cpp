// `fp8kit cast`: output format, the spec's cases, negative values and -inf/nan with and without `--`,
// overflow policies, and one-line errors.
#include "cli/run_cli.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace fp8kit {
namespace {

using testing::one_error_line;
using testing::run_cli;

TEST(CastCli, SpecCasesE4M3) {
  const auto r = run_cli("cast --format e4m3 -- 464 1.0625 1.1875 0x1p-10 0x1.8p-10 -0 -1.5 -inf nan 500");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output,
            "464 0x7E 448\n"
            "1.0625 0x38 1\n"
            "1.1875 0x3A 1.25\n"
            "0x1p-10 0x00 0\n"
            "0x1.8p-10 0x01 0.001953125\n"
            "-0 0x80 -0\n"
            "-1.5 0xBC -1.5\n"
            "-inf 0xFE -448\n"
            "nan 0x7F nan\n"
            "500 0x7E 448\n");
}

// 1 + 2^-4 + 2^-12 is just above the midpoint of E4M3's 1 and 1.125, so it rounds up; bf16 rounds it
// to the midpoint itself, which then rounds to even (1): double rounding.
TEST(CastCli, ViaBf16ShowsTheBf16ValueAndItsDoubleRounding) {
  const auto direct = run_cli("cast -- 1.062744140625");
  EXPECT_EQ(direct.exit_code, 0) << direct.output;
  EXPECT_EQ(direct.output, "1.062744140625 0x39 1.125\n");
  const auto r = run_cli("cast --via-bf16 -- 1.062744140625 -1.5 1e30 nan");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output,
            "1.062744140625 bf16 1.0625 0x38 1\n"
            "-1.5 bf16 -1.5 0xBC -1.5\n"
            "1e30 bf16 1.00025555e+30 0x7E 448\n"  // ml_dtypes agrees
            "nan bf16 nan 0x7F nan\n");
}

TEST(CastCli, NegativeValuesWithoutDoubleDash) {
  const auto r = run_cli("cast -1.5 -inf 2 -nan -Infinity 1e-3");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output,
            "-1.5 0xBC -1.5\n"
            "-inf 0xFE -448\n"
            "2 0x40 2\n"
            "-nan 0xFF nan\n"
            "-Infinity 0xFE -448\n"
            "1e-3 0x01 0.001953125\n");
}

TEST(CastCli, NonSaturatingAndE5M2) {
  auto r = run_cli("cast --format e4m3 --no-saturate -- 464 465 -inf");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "464 0x7E 448\n465 0x7F nan\n-inf 0xFF nan\n");
  r = run_cli("cast --format e5m2 --no-saturate -- 61439 61440 -inf 0.1");
  EXPECT_EQ(r.output, "61439 0x7B 57344\n61440 0x7C inf\n-inf 0xFC -inf\n0.1 0x2E 0.09375\n");
  r = run_cli("cast --format e5m2 -- 61440 -inf 1e-9");
  EXPECT_EQ(r.output, "61440 0x7B 57344\n-inf 0xFB -57344\n1e-9 0x00 0\n");
}

TEST(CastCli, EchoesInputAsTyped) {
  const auto r = run_cli("cast 1e0 +2.50 0X1P+0");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(r.output, "1e0 0x38 1\n+2.50 0x42 2.5\n0X1P+0 0x38 1\n");
}

TEST(CastCli, BadArgumentsGiveOneLineErrors) {
  for (const char* args : {"cast abc", "cast 1 2x", "cast", "cast --format e3m4 1"}) {
    const auto r = run_cli(args);
    EXPECT_EQ(r.exit_code, 1) << args;
    EXPECT_TRUE(one_error_line(r.output)) << args << ": " << r.output;
  }
  const auto r = run_cli("cast --bogus 1");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_TRUE(one_error_line(r.output)) << r.output;
}

TEST(CastCli, Help) {
  const auto r = run_cli("cast --help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(r.output.find("--no-saturate"), std::string::npos);
  EXPECT_NE(r.output.find("--format"), std::string::npos);
}

}  // namespace
}  // namespace fp8kit
