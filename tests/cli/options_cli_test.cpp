// The options every subcommand shares the checks of (src/cli/options.h): numbers outside their range,
// seeds, empty paths and unknown subcommands fail while parsing, before any data is read, with one
// line naming the option and what it takes.
#include "cli/run_cli.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace fp8kit {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::run_cli;

struct Case {
  std::string arguments;
  std::string message;
};

// Each case fails with exit status 2 and its message on one line. --data /nonexistent and --vocab
// /nonexistent would be the error if the option were checked only after reading them.
void expect_usage_errors(const std::vector<Case>& cases) {
  for (const Case& c : cases) {
    const auto r = run_cli(c.arguments);
    EXPECT_EQ(r.exit_code, 2) << c.arguments << "\n" << r.output;
    EXPECT_EQ(r.output.rfind("error: " + c.message, 0), 0u) << c.arguments << "\n" << r.output;
    EXPECT_EQ(r.output.find('\n'), r.output.size() - 1) << c.arguments << "\n" << r.output;
    EXPECT_LT(r.output.size(), 200u) << c.arguments << "\n" << r.output;  // no 309-digit DBL_MAX
  }
}

TEST(OptionsCli, NumbersOutsideTheirRangeNameTheOptionAndTheRange) {
  expect_usage_errors({
      {"train --data /nonexistent --amax-history -1", "--amax-history: must be a whole number from 1 to 100000, not '-1'"},
      {"train --data /nonexistent --amax-history 1000000000000", "--amax-history: must be a whole number from 1 to"},
      {"train --data /nonexistent --batch-size 4611686018427387904", "--batch-size: must be a whole number from 1 to"},
      {"train --data /nonexistent --batch-size 0", "--batch-size: must be a whole number from 1 to 100000, not '0'"},
      {"train --data /nonexistent --epochs -1", "--epochs: must be a whole number from 0 to 100000, not '-1'"},
      {"train --data /nonexistent --limit nan", "--limit: must be a whole number from 0 to 1000000000, not 'nan'"},
      {"train --data /nonexistent --limit 1e3", "--limit: must be a whole number"},
      {"tokenize --vocab /nonexistent --sequence-length 4611686018427387904 a",
       "--sequence-length: must be a whole number from 0 to 1000000"},
      {"tokenize --vocab /nonexistent --sequence-length -1 a", "--sequence-length: must be a whole number from 0"},
      {"vocab --data /nonexistent --out v.txt --size 0", "--size: must be a whole number from 2 to 10000000, not '0'"},
      {"vocab --data /nonexistent --out v.txt --validation-split nan", "--validation-split: must be a number from 0 to 0.999"},
      {"vocab --data /nonexistent --out v.txt --validation-split 1", "--validation-split: must be a number from 0 to 0.999"},
      {"quant-error --steps 0", "--steps: must be a whole number from 1 to 200, not '0'"},
      {"quant-error --steps 201", "--steps: must be a whole number from 1 to 200, not '201'"},
      {"bench gemm --iters 0", "--iters: must be a whole number from 1 to 100000, not '0'"},
      {"bench quantize --repeats -3", "--repeats: must be a whole number from 1 to 1000, not '-3'"},
      {"bench gemm --warmup 99999999999", "--warmup: must be a whole number from 0 to 1000"},
      {"bench gemm --shapes 8192x8192", "--shapes: bad shape '8192x8192': write MxNxK of whole numbers"},
      {"bench quantize --shapes 16384x0", "--shapes: bad shape '16384x0': write ROWSxCOLS"},
      {"bench quantize --shapes 4096x99999999999999", "--shapes: bad shape"},
  });
}

TEST(OptionsCli, OneSeedRuleForEverySubcommand) {
  expect_usage_errors({
      {"train --data /nonexistent --seed -1", "--seed: must be a whole number from 0 to 18446744073709551615, not '-1'"},
      {"train --data /nonexistent --seed 18446744073709551616",
       "--seed: must be a whole number from 0 to 18446744073709551615, not '18446744073709551616'"},
      {"quant-error --seed -1", "--seed: must be a whole number from 0 to 18446744073709551615, not '-1'"},
      {"quant-error --seed 18446744073709551616", "--seed: must be a whole number from 0 to 18446744073709551615"},
      {"quant-error --seed 0x10", "--seed: must be a whole number from 0 to 18446744073709551615, not '0x10'"},
      // vocab's seed is numpy's RandomState seed of Keras' validation split, 32 bits.
      {"vocab --data /nonexistent --out v.txt --seed -1", "--seed: must be a whole number from 0 to 4294967295, not '-1'"},
      {"vocab --data /nonexistent --out v.txt --seed 4294967296", "--seed: must be a whole number from 0 to 4294967295"},
  });
  EXPECT_EQ(run_cli("quant-error --steps 1 --seed 18446744073709551615").exit_code, 0);
}

// bench gemm autotunes by default: --help shows the flag that turns it off, without CLI11's "{false}".
TEST(OptionsCli, BenchGemmHelpShowsNoAutotuneAsAPlainFlag) {
  const auto r = run_cli("bench gemm --help");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("--no-autotune "));
  EXPECT_THAT(r.output, Not(HasSubstr("{false}")));
}

TEST(OptionsCli, AnOptionGivenTwiceIsNamed) {
  expect_usage_errors({
      {"train --data /nonexistent --epochs 1 --epochs 2", "--epochs: given more than once; give it once"},
      {"quant-error --steps 1 --steps 2", "--steps: given more than once; give it once"},
  });
}

TEST(OptionsCli, EmptyPathsAreRefused) {
  expect_usage_errors({
      {"train --data ''", "--data: must be a path, not empty"},
      {"train --out ''", "--out: must be a path, not empty"},
      {"train --vocab ''", "--vocab: must be a path, not empty"},
      {"vocab --data '' --out v.txt", "--data: must be a path, not empty"},
      {"vocab --subdir '' --out v.txt", "--subdir: must be a path, not empty"},
      {"vocab --out ''", "--out: must be a path, not empty"},
      {"tokenize --vocab '' a", "--vocab: must be a path, not empty"},
      {"quant-error --out ''", "--out: must be a path, not empty"},
  });
  EXPECT_THAT(run_cli("train --data ''").output, Not(HasSubstr("download")));
}

TEST(OptionsCli, UnknownSubcommandsSayWhatThereIs) {
  expect_usage_errors({
      {"trian --epochs 1",
       "unknown subcommand 'trian' (fp8kit has bench, cast, device, formats, lab, lm, quant-error, report, tokenize, train, vocab); "
       "run `fp8kit --help`"},
      {"bench gem", "unknown subcommand 'gem' (fp8kit bench has gemm, quantize); run `fp8kit bench --help`"},
  });
  // Other parse errors point at the subcommand's own help.
  EXPECT_THAT(run_cli("formats extra").output, HasSubstr("(see `fp8kit formats --help`)"));
}

}  // namespace
}  // namespace fp8kit
