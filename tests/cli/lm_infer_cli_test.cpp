// The inference subcommands end to end on a tiny trained model: calibrate on a text file, pack with
// static scales and an FP8 KV cache, then generate, evaluate, compare greedy continuations with the
// bf16 model, and benchmark; and their one-line errors.
#include "cli/run_cli.h"
#include "common/temp_dir.h"
#include "common/tiny_imdb.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace fp8kit::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::MatchesRegex;

std::string tail(const std::string& text) { return text.substr(text.size() > 1500 ? text.size() - 1500 : 0); }

TEST(LmInferCli, CalibratesPacksAndServes) {
  const TempDir dir("lm_infer_cli");
  const std::string data = make_tiny_imdb(dir.path(), "aclImdb", 12).string();
  const std::string run = (dir.path() / "run").string();
  CliResult r = run_cli("lm train --precision bf16 --steps 2 --config tiny --data " + data + " --out " + run +
                        " --vocab-size 300 --seq 32 --batch 2 --warmup 1 --eval-batches 1");
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  const std::string bf16 = run + "/model-bf16", fp8 = (dir.path() / "fp8").string();
  const std::string prompts = (dir.path() / "prompts.txt").string();
  std::ofstream(prompts) << "the movie was great\n\nthe film was terrible and long\nmusic\n";

  const std::string calibration = (dir.path() / "calibration.safetensors").string();
  r = run_cli("lm calibrate --model " + bf16 + " --out " + calibration + " --text " + prompts + " --seq 16");
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("over 3 prompts"));
  r = run_cli("lm pack --model " + bf16 + " --out " + fp8 + " --calibration " + calibration +
              " --weights tensor --activations static --kv-cache fp8");
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);

  // A packed directory is served in FP8; greedy generation repeats itself.
  const CliResult a = run_cli("lm generate --max-new-tokens 6 --kv-cache fp8 --model " + fp8 + " 'the movie'");
  const CliResult b = run_cli("lm generate --max-new-tokens 6 --kv-cache fp8 --model " + fp8 + " 'the movie'");
  ASSERT_EQ(a.exit_code, 0) << tail(a.output);
  EXPECT_THAT(a.output, ::testing::StartsWith("the movie"));
  EXPECT_EQ(a.output, b.output);
  r = run_cli("lm generate --max-new-tokens 4 --stats --temperature 0.8 --top-k 20 --model " + fp8 + " --prompts " +
              prompts);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("[2] music"));
  EXPECT_THAT(r.output, HasSubstr("FP8 weights"));

  r = run_cli("lm eval --seq 16 --batch 2 --data " + data + " --model " + fp8 + " --kv-cache fp8");
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("(runtime: fp8 weights, fp8 KV cache): validation loss"));
  r = run_cli("lm eval --seq 16 --batch 2 --runtime --data " + data + " --model " + bf16);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("(runtime: bf16 weights, bf16 KV cache)"));
  // Engine options without the engine, training options with it: refused, not ignored.
  r = run_cli("lm eval --seq 16 --batch 2 --data " + data + " --model " + bf16 + " --kv-cache fp8");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("--kv-cache and --activations set the inference engine: add --runtime"));
  r = run_cli("lm eval --seq 16 --batch 2 --runtime --precision fp8 --data " + data + " --model " + bf16);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("--precision and --fp8-attention set the training model"));
  // An FP8 KV cache without calibrated scales says so; the pack's calibrated ones (above) do not.
  EXPECT_THAT(a.output, ::testing::Not(HasSubstr("note:")));
  r = run_cli("lm generate --max-new-tokens 2 --kv-cache fp8 --model " + bf16 + " 'the movie'");
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("has no calibrated k/v scales: the FP8 KV cache stores keys and values at scale 1"));
  r = run_cli("lm generate --max-new-tokens 100000 --model " + bf16 + " 'the movie'");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, ::testing::StartsWith("error: the longest prompt's "));  // refused before any text

  r = run_cli("lm agreement --prompts 4 --prompt-tokens 8 --tokens 6 --data " + data + " --reference " + bf16 +
              " --model " + fp8);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("the first 6 greedy tokens of 4 prompts"));
  EXPECT_THAT(r.output, HasSubstr("teacher-forced"));

  r = run_cli("lm bench --config tiny --vocab-size 300 --device cpu --prefill 1x16 --decode 2x8 --iterations 1 "
              "--decode-steps 2");
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("prefill 1x16"));
  EXPECT_THAT(r.output, HasSubstr("decode 2x8"));
  EXPECT_THAT(r.output, MatchesRegex("(.|\n)*fp8 .* decode 2x8 .*x(.|\n)*"));
}

TEST(LmInferCli, RefusesWhatItCannotUse) {
  const TempDir dir("lm_infer_cli_errors");
  CliResult r = run_cli("lm generate --model " + dir.path().string() + " hi");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("config.json"));
  r = run_cli("lm bench --config tiny --device cpu --prefill 8by2");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("BATCHxTOKENS"));
  r = run_cli("lm bench --config tiny --device cpu --prefill 1x8 --decode 1x8 --weights fp4");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("--weights takes bf16 and fp8"));
  r = run_cli("lm generate --model " + dir.path().string() + " --kv-cache fp16 hi");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("--kv-cache"));
}

}  // namespace
}  // namespace fp8kit::testing
