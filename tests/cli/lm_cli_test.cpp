// `fp8kit lm` end to end on a tiny generated aclImdb folder: train (learning the tokenizer, writing
// the metrics, checkpoint and HF model directory), resume, eval, greedy generation that repeats with
// the same model, compare; per-Linear recipes; a data-parallel job of local processes (--procs) resumed
// alone; and one-line errors for what a user gets wrong.
#include "cli/run_cli.h"
#include "common/read_text.h"
#include "common/temp_dir.h"
#include "common/tiny_imdb.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fp8kit::testing {
namespace {

using ::testing::HasSubstr;

std::string tail(const std::string& text) { return text.substr(text.size() > 1500 ? text.size() - 1500 : 0); }

TEST(LmCli, TrainsResumesEvaluatesGeneratesAndCompares) {
  const TempDir dir("lm_cli");
  const std::string data = make_tiny_imdb(dir.path(), "aclImdb", 12).string();
  const std::string out = (dir.path() / "run").string();
  const std::string common = " --config tiny --data " + data + " --out " + out +
                             " --vocab-size 300 --seq 32 --batch 2 --warmup 2 --eval-batches 2 --eval-every 3";
  CliResult r = run_cli("lm train --precision fp8 --steps 3" + common);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("Learned a byte-level BPE tokenizer of 300 tokens"));
  EXPECT_THAT(r.output, HasSubstr("fp8 on cpu"));
  EXPECT_THAT(r.output, HasSubstr("3/3 ━━━━━━━━━━━━━━━━━━━━"));
  for (const char* file : {"tokenizer.json", "metrics.jsonl", "checkpoint-fp8.safetensors", "model-fp8/config.json",
                           "model-fp8/model.safetensors", "model-fp8/tokenizer.json", "model-fp8/tokenizer_config.json"})
    EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(out) / file)) << file;

  r = run_cli("lm train --precision fp8 --steps 5 --resume" + common);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("Read the tokenizer " + out + "/tokenizer.json (300 tokens)\n"));
  EXPECT_THAT(r.output, HasSubstr("Resumed from"));
  EXPECT_THAT(r.output, HasSubstr("at step 3"));
  r = run_cli("lm train --precision fp8 --steps 5 --resume --seed 9" + common);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("--seed"));

  const std::string model = " --model " + out + "/model-fp8";
  r = run_cli("lm eval --seq 32 --batch 2 --data " + data + model);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("validation loss"));
  const std::string text = (dir.path() / "review.txt").string();
  std::ofstream(text) << "the movie was great, the film was wonderful and the music was superb";
  r = run_cli("lm eval --seq 4 --batch 2 --text " + text + model);  // one text file as the document
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr(text + " loss "));
  const CliResult a = run_cli("lm generate --max-new-tokens 8" + model + " 'the movie'");
  const CliResult b = run_cli("lm generate --max-new-tokens 8" + model + " 'the movie'");
  ASSERT_EQ(a.exit_code, 0) << tail(a.output);
  EXPECT_THAT(a.output, ::testing::StartsWith("the movie"));
  EXPECT_EQ(a.output, b.output);

  r = run_cli("lm compare " + out);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("fp8 delayed"));
}

TEST(LmCli, TrainsWithBlockScaling) {
  const TempDir dir("lm_cli");
  const std::string out = (dir.path() / "run").string();
  CliResult r = run_cli("lm train --precision fp8 --recipe block --formats e4m3 --steps 2 --config tiny --data " +
                        make_tiny_imdb(dir.path(), "aclImdb", 12).string() + " --out " + out +
                        " --vocab-size 300 --seq 32 --batch 2 --warmup 1 --eval-batches 1 --eval-every 2");
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("2/2 ━━━━━━━━━━━━━━━━━━━━"));
  EXPECT_THAT(r.output, HasSubstr("speed not measured"));  // two steps: none timed, no "0 tokens/s"
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("tok/s")));
  r = run_cli("lm compare " + out);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("fp8 block e4m3"));  // formats other than hybrid name their runs apart
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("nan")));  // no bf16 run: no ratio to it
  const std::filesystem::path log = std::filesystem::path(out) / "metrics.jsonl";
  std::ofstream(log, std::ios::app) << "{\"event\": \"valid";  // a run killed (or still) writing its last line
  r = run_cli("lm compare " + out);
  EXPECT_EQ(r.exit_code, 0) << tail(r.output);
  std::ofstream(log, std::ios::app) << "\n";  // a whole line that is no event
  r = run_cli("lm compare " + out);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("metrics.jsonl:"));
  EXPECT_THAT(r.output, HasSubstr(": not a JSON object"));
}

TEST(LmCli, TrainsAndEvaluatesWithFp8Attention) {
  const TempDir dir("lm_cli");
  const std::string out = (dir.path() / "run").string(), data = make_tiny_imdb(dir.path(), "aclImdb", 12).string();
  CliResult r = run_cli("lm train --precision fp8 --fp8-attention --steps 2 --config tiny --data " + data + " --out " +
                        out + " --vocab-size 300 --seq 32 --batch 2 --warmup 1 --eval-batches 1 --eval-every 2");
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("2/2 ━━━━━━━━━━━━━━━━━━━━"));
  r = run_cli("lm compare " + out);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("fp8 delayed + fp8 attention"));
  r = run_cli("lm eval --seq 32 --batch 2 --batches 1 --fp8-attention --data " + data + " --model " + out +
              "/model-fp8");
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("perplexity"));
}

TEST(LmCli, TrainsWithRecomputationAndTheLossInChunks) {
  const TempDir dir("lm_cli_memory");
  const std::string data = make_tiny_imdb(dir.path(), "aclImdb", 12).string();
  auto train = [&](const std::string& name, const std::string& flags) {
    return run_cli("lm train --precision fp8 --steps 2 --config tiny --data " + data + " --out " +
                   (dir.path() / name).string() + " --vocab-size 300 --seq 32 --batch 2 --warmup 1 --eval-batches 1" +
                   flags);
  };
  const CliResult plain = train("plain", " --loss-chunk 64");
  ASSERT_EQ(plain.exit_code, 0) << tail(plain.output);
  const CliResult memory = train("memory", " --recompute --loss-chunk 64");
  ASSERT_EQ(memory.exit_code, 0) << tail(memory.output);
  EXPECT_THAT(memory.output, HasSubstr("2/2 ━━━━━━━━━━━━━━━━━━━━"));
  // The same run, bit for bit: the same losses, gradient norms and validation in the metrics.
  auto metrics = [&](const std::string& name) {
    std::vector<nlohmann::json> events;
    std::ifstream in(dir.path() / name / "metrics.jsonl");
    for (std::string line; std::getline(in, line);) {
      nlohmann::json e = nlohmann::json::parse(line);
      if (e["event"] == "run") {
        EXPECT_EQ(e["recompute"], name == "memory");
      }
      if (e["event"] != "step" && e["event"] != "validation") continue;
      e.erase("tokens_per_second");
      events.push_back(e);
    }
    return events;
  };
  const std::vector<nlohmann::json> expected = metrics("plain");
  EXPECT_EQ(expected.size(), 3u);
  EXPECT_EQ(metrics("memory"), expected);
  const CliResult bad = train("bad", " --loss-chunk -1");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_THAT(bad.output, HasSubstr("--loss-chunk"));
}

TEST(LmCli, TrainsAndEvaluatesWithPerLinearRecipes) {
  const TempDir dir("lm_cli_rules");
  const std::string data = make_tiny_imdb(dir.path(), "aclImdb", 12).string();
  const std::string out = (dir.path() / "run").string();
  const std::string common = " --config tiny --data " + data + " --out " + out +
                             " --vocab-size 300 --seq 32 --batch 2 --warmup 1 --eval-batches 1 --eval-every 2";
  CliResult r = run_cli("lm train --precision fp8 --steps 2 --linear-recipe lm_head=current "
                        "--linear-recipe 'model.layers.*.mlp.down_proj=bf16' --linear-recipe 'model.layers.0.*=block'" +
                        common);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("2/2 ━━━━━━━━━━━━━━━━━━━━"));
  const std::string log = testing::read_text(std::filesystem::path(out) / "metrics.jsonl");
  EXPECT_THAT(log, HasSubstr(R"("linear_recipes":["lm_head=current","model.layers.*.mlp.down_proj=bf16")"));
  // Resuming with other rules is refused, naming the flag.
  r = run_cli("lm train --precision fp8 --steps 3 --resume --linear-recipe lm_head=delayed" + common);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("--linear-recipe"));
  r = run_cli("lm compare " + out);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("fp8 delayed lm_head=current"));
  r = run_cli("lm eval --seq 32 --batch 2 --batches 1 --precision bf16 --linear-recipe lm_head=fp8 --data " + data +
              " --model " + out + "/model-fp8");
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("validation loss"));

  r = run_cli("lm train --precision fp8 --steps 1 --linear-recipe lm_head=fp4" + common);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("error: Linear recipe rule 'lm_head=fp4' names an unknown recipe 'fp4'"));
  r = run_cli("lm train --precision fp8 --steps 1 --linear-recipe lm_head" + common);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("'lm_head' is not PATTERN=RECIPE"));
  r = run_cli("lm train --precision fp8 --steps 1 --linear-recipe 'model.layer.*=bf16'" + common);
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("error: Linear recipe pattern 'model.layer.*' matches no Linear"));
}

TEST(LmCli, TrainsAsTwoLocalProcessesAndResumesAlone) {
  const TempDir dir("lm_cli_procs");
  const std::string out = (dir.path() / "run").string();
  const std::string common = " --config tiny --data " + make_tiny_imdb(dir.path(), "aclImdb", 12).string() +
                             " --out " + out + " --vocab-size 300 --seq 32 --warmup 1 --eval-batches 1";
  CliResult r = run_cli("lm train --precision fp8 --steps 2 --batch 2 --procs 2 --zero1" + common);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("[rank 0] Data parallel: 2 processes (fp8kit --procs, tcp backend), 1 of each"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("[rank 1] Llama")));  // rank 0 alone reports
  for (const char* file : {"tokenizer.json", "metrics.jsonl", "checkpoint-fp8.safetensors", "model-fp8/config.json"})
    EXPECT_TRUE(std::filesystem::exists(std::filesystem::path(out) / file)) << file;
  r = run_cli("lm train --precision fp8 --steps 3 --batch 2 --resume" + common);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("at step 2"));

  r = run_cli("lm train --precision fp8 --steps 3 --procs 2 --batch 3" + common);
  EXPECT_NE(r.exit_code, 0);
  // Refused before the ranks start: one line, not one per rank.
  EXPECT_EQ(r.output, "error: --batch 3 is not divisible by the 2 processes of the job: give a multiple of 2\n");
}

// A folder named like a preset in the working directory ("tiny", without a config.json) leaves
// --config tiny the preset; it was read as the folder's missing config.json.
TEST(LmCli, APresetIsNotShadowedByAFolderOfItsName) {
  const TempDir dir("lm_cli_preset_folder");
  const std::string data = make_tiny_imdb(dir.path(), "aclImdb", 12).string();
  std::filesystem::create_directories(dir.path() / "tiny");
  const std::filesystem::path before = std::filesystem::current_path();
  std::filesystem::current_path(dir.path());
  const CliResult r = run_cli("lm train --config tiny --steps 1 --vocab-size 300 --seq 32 --batch 2 --eval-batches 1 "
                              "--data " + data + " --out " + (dir.path() / "run").string());
  std::filesystem::current_path(before);
  EXPECT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("tiny/config.json")));

  // Another --vocab-size in the same --out reads the tokenizer there, and says that it did.
  const CliResult again = run_cli("lm train --config tiny --steps 1 --vocab-size 400 --seq 32 --batch 2 "
                                  "--eval-batches 1 --data " + data + " --out " + (dir.path() / "run").string());
  EXPECT_EQ(again.exit_code, 0) << tail(again.output);
  EXPECT_THAT(again.output, HasSubstr("(300 tokens; --vocab-size 400 sets the size of a learned one only)"));
}

TEST(LmCli, RefusesWhatItCannotUse) {
  const TempDir dir("lm_cli_errors");
  CliResult r = run_cli("lm train --config huge --data " + make_tiny_imdb(dir.path()).string() + " --out " +
                        (dir.path() / "o").string() + " --vocab-size 300 --steps 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("error: "));
  EXPECT_THAT(r.output, HasSubstr("huge"));
  r = run_cli("lm eval --model " + dir.path().string());
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("config.json"));
  r = run_cli("lm generate --model " + dir.path().string() + " --top-p 0 hi");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_THAT(r.output, HasSubstr("--top-p"));
}

}  // namespace
}  // namespace fp8kit::testing
