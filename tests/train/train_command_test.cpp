// `fp8kit train` end to end on a tiny generated aclImdb folder (--compare, checkpoints, metrics,
// --resume, --health-every with `fp8kit report`), and its refusal of bad options before loading any data.
#include "common/read_text.h"
#include "common/temp_dir.h"
#include "common/tiny_imdb.h"
#include "io/safetensors.h"
#include "numerics/scale.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <tuple>
#include <vector>
#include <sys/wait.h>

namespace {

using ::testing::HasSubstr;
using fp8kit::testing::make_tiny_imdb;
using fp8kit::testing::read_text;

struct CommandResult {
  int exit_code;
  std::string output;  // stdout and stderr
};

// `environment` goes before the command: variables, or `ulimit ... &&`.
CommandResult run_train(const std::string& args, const std::string& environment = "") {
  const std::string command = environment + std::string(FP8KIT_CLI) + " train " + args + " 2>&1";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  std::string output;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

std::string tail(const std::string& text) { return text.substr(text.size() > 1500 ? text.size() - 1500 : 0); }

TEST(TrainCommand, ComparesPrecisionsWritesCheckpointsAndResumes) {
  const fp8kit::testing::TempDir dir("train_command");
  const std::string common = " --data " + make_tiny_imdb(dir.path()).string() +
                             " --vocab " + (dir / "vocab.txt").string() + " --out " + (dir / "out").string() +
                             " --batch-size 8 --seed 3";

  CommandResult r = run_train("--compare bf16,fp8 --epochs 1 --inspect-fp8" + common);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("Total params: 653,953"));
  EXPECT_THAT(r.output, HasSubstr("3/3 ━━━━━━━━━━━━━━━━━━━━"));
  EXPECT_THAT(r.output, HasSubstr("transformer_decoder/self_attention/query/inputs_amax_history: [0, 0, 0, 0, 0, 0, "
                                  "0, 0, ...] (1024 values, 0 nonzero)"));
  EXPECT_THAT(r.output, HasSubstr("(1024 values, 3 nonzero)"));  // after 3 steps (20 reviews, batches of 8)
  EXPECT_THAT(r.output, HasSubstr("precision   test accuracy  test loss  time per epoch"));
  const auto fp8 = dir / "out" / "checkpoint-fp8.safetensors";
  ASSERT_TRUE(std::filesystem::exists(dir / "out" / "checkpoint-bf16.safetensors"));
  EXPECT_EQ(fp8kit::io::read_safetensors(fp8).metadata.at("epoch"), "1");

  r = run_train("--compare bf16,fp8 --epochs 2 --resume" + common);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("Resumed bf16 from"));
  EXPECT_THAT(r.output, HasSubstr("Epoch 2/2"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("Epoch 1/2")));
  EXPECT_EQ(fp8kit::io::read_safetensors(fp8).metadata.at("step"), "6");

  std::ifstream metrics(dir / "out" / "metrics.jsonl");
  int lines = 0;
  for (std::string line; std::getline(metrics, line);) ++lines;
  // Two run lines; per precision its two epochs and one test (the resumed run's replaces the first's);
  // FP8's health at each run's last step (3 and 6; --health-every is 100).
  EXPECT_EQ(lines, 2 + 2 * (2 + 1) + 2);

  // Resuming the finished run trains and evaluates nothing again, and logs nothing.
  const auto log = dir / "out" / "metrics.jsonl";
  const std::string finished = read_text(log);
  r = run_train("--compare bf16,fp8 --epochs 2 --resume" + common);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("fp8 already ran to --epochs 2 and its test result is in " + log.string() +
                                  "; pass --epochs 3 or more with --resume to train on"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("Test: ")));
  EXPECT_EQ(read_text(log), finished);
  // A kill after the last checkpoint but before the test line: the resume evaluates the test set.
  std::string without_bf16_test;
  for (size_t begin = 0, end; begin < finished.size(); begin = end + 1) {
    end = finished.find('\n', begin);
    const std::string line = finished.substr(begin, end - begin + 1);
    if (line.find("\"event\":\"test\"") == std::string::npos || line.find("\"bf16\"") == std::string::npos) {
      without_bf16_test += line;
    }
  }
  ASSERT_LT(without_bf16_test.size(), finished.size());
  std::ofstream(log) << without_bf16_test;
  r = run_train("--compare bf16,fp8 --epochs 2 --resume" + common);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("Accuracy (bf16)"));
  EXPECT_THAT(r.output, HasSubstr("fp8 already ran to --epochs 2"));
  const std::string repaired = read_text(log);
  EXPECT_EQ(std::count(repaired.begin(), repaired.end(), '\n'), lines + 1);  // its run line and the test line

  r = run_train("--precision fp8 --epochs 3 --resume --lag keras" + common);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("was trained with recipe delayed scaling, te lag"));
}

// --epochs 0 evaluates the untrained models: the comparison has no time per epoch to show.
TEST(TrainCommand, ComparingWithoutEpochsShowsNoTimePerEpoch) {
  const fp8kit::testing::TempDir dir("train_command_no_epochs");
  const CommandResult r = run_train("--compare bf16,fp8 --epochs 0 --data " + make_tiny_imdb(dir.path()).string() +
                                    " --vocab " + (dir / "vocab.txt").string() + " --out " + (dir / "out").string());
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("time per epoch"));
  EXPECT_THAT(r.output, ::testing::ContainsRegex("fp8 +[0-9.]+% +[0-9.]+ +-\n"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("0.0s\n")));
}

// The `*_scale` tensors of a checkpoint, by name.
std::map<std::string, float> scales(const std::filesystem::path& checkpoint) {
  std::map<std::string, float> out;
  for (const auto& t : fp8kit::io::read_safetensors(checkpoint).tensors) {
    if (t.name.ends_with("_scale")) out[t.name] = t.to_f32().at(0);
  }
  return out;
}

// Every recipe field has an option; each trains, and the checkpoint and the metrics log record it.
TEST(TrainCommand, EveryRecipeOptionTrainsAndIsRecorded) {
  const fp8kit::testing::TempDir dir("train_command");
  const std::string common = " --data " + make_tiny_imdb(dir.path()).string() + " --vocab " +
                             (dir / "vocab.txt").string() + " --batch-size 10 --seed 3 --precision fp8 --epochs 1";
  // The text checkpoints recorded before these options existed: the defaults must still write it.
  const std::string defaults = "delayed scaling, te lag, amax history 1024, max amax, e4m3 forward, e5m2 backward";
  const std::vector<std::tuple<std::string, std::string, std::string>> cases{
      {"", defaults, "\"amax_algo\":\"max\""},
      {"--amax-algo most_recent", "most_recent amax", "\"amax_algo\":\"most_recent\""},
      {"--margin 3", defaults + ", margin 3", "\"margin\":3"},
      {"--formats e4m3", "e4m3 forward, e4m3 backward", "\"formats\":\"e4m3\""},
      {"--power-of-two-scales", defaults + ", power-of-two scales", "\"power_of_two_scales\":true"},
      {"--skip-zero-amax", defaults + ", skip zero amax", "\"skip_zero_amax\":true"}};
  for (size_t i = 0; i < cases.size(); ++i) {
    const auto& [option, recorded, logged] = cases[i];
    SCOPED_TRACE(option);
    const auto out = dir / "out" / std::to_string(i);
    const CommandResult r = run_train(option + " --inspect-fp8 --out " + out.string() + common);
    ASSERT_EQ(r.exit_code, 0) << tail(r.output);
    const std::string metadata = fp8kit::io::read_safetensors(out / "checkpoint-fp8.safetensors").metadata.at("recipe");
    if (option.empty()) {
      EXPECT_EQ(metadata, defaults);
    }
    EXPECT_THAT(metadata, HasSubstr(recorded));
    EXPECT_THAT(r.output, HasSubstr("FP8 recipe: " + metadata + "\n"));  // --inspect-fp8
    std::ifstream metrics(out / "metrics.jsonl");
    std::string header;
    std::getline(metrics, header);
    EXPECT_THAT(header, HasSubstr(logged));
  }
}

// The options change the training as they say, on the CPU. A checkpoint holds the scales the next
// step would use. After one step (20 reviews, one batch) every scale is fp8_max / amax of step 0, so
// --margin 1 halves each one and --power-of-two-scales rounds each down to a power of two; --formats
// e4m3 keeps the forward's scales and changes the output gradients'. After two steps (batches of 10,
// both runs alike until then: step 1 uses the scales of step 0's amaxes) most_recent takes step 1's
// amax where max takes the larger of steps 0 and 1.
TEST(TrainCommand, RecipeOptionsChangeTheScales) {
  const fp8kit::testing::TempDir dir("train_command");
  const std::string common = " --data " + make_tiny_imdb(dir.path()).string() + " --vocab " +
                             (dir / "vocab.txt").string() + " --seed 3 --precision fp8 --epochs 1";
  const auto train = [&](const std::string& name, const std::string& options) {
    const CommandResult r = run_train(options + " --out " + (dir / name).string() + common);
    EXPECT_EQ(r.exit_code, 0) << tail(r.output);
    return scales(dir / name / "checkpoint-fp8.safetensors");
  };
  const auto plain = train("plain", "--batch-size 20");
  const auto margin = train("margin", "--batch-size 20 --margin 1");
  const auto power_of_two = train("power_of_two", "--batch-size 20 --power-of-two-scales");
  const auto e4m3 = train("e4m3", "--batch-size 20 --formats e4m3");
  ASSERT_FALSE(plain.empty());
  ASSERT_EQ(margin.size(), plain.size());
  ASSERT_EQ(power_of_two.size(), plain.size());
  ASSERT_EQ(e4m3.size(), plain.size());
  int changed_gradients = 0;
  for (const auto& [name, scale] : plain) {
    EXPECT_EQ(margin.at(name), scale / 2) << name;
    EXPECT_EQ(power_of_two.at(name), fp8kit::round_down_to_power_of_two(scale)) << name;
    if (name.ends_with("outputs_grad_scale")) {
      changed_gradients += e4m3.at(name) != scale;
    } else {
      EXPECT_EQ(e4m3.at(name), scale) << name;  // the forward is the same
    }
  }
  EXPECT_GT(changed_gradients, 0);

  const auto max = train("max", "--batch-size 10");
  const auto recent = train("recent", "--batch-size 10 --amax-algo most_recent");
  ASSERT_EQ(recent.size(), max.size());
  int larger = 0;
  for (const auto& [name, scale] : max) {
    EXPECT_GE(recent.at(name), scale) << name;  // the max of a window holding the most recent amax
    larger += recent.at(name) > scale;
  }
  EXPECT_GT(larger, 0);
}

// A checkpoint continues only under the recipe it was trained with; the error names the options.
TEST(TrainCommand, ResumeRefusesADifferentRecipe) {
  const fp8kit::testing::TempDir dir("train_command");
  const std::string common = " --data " + make_tiny_imdb(dir.path()).string() + " --vocab " +
                             (dir / "vocab.txt").string() + " --out " + (dir / "out").string() +
                             " --batch-size 10 --seed 3 --precision fp8";
  CommandResult r = run_train("--epochs 1 --margin 2" + common);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  // A refused run logs nothing: no "run" line of a run that never ran.
  const auto metrics = dir / "out" / "metrics.jsonl";
  std::string log = read_text(metrics);
  for (const std::string option : {"--margin 1", "--amax-algo most_recent --margin 2", "--formats e4m3 --margin 2",
                                   "--margin 2 --power-of-two-scales", "--margin 2 --skip-zero-amax"}) {
    r = run_train("--epochs 2 --resume " + option + common);
    EXPECT_EQ(r.exit_code, 1) << option;
    EXPECT_THAT(r.output, HasSubstr("was trained with recipe delayed scaling, te lag, amax history 1024, max amax, "
                                    "e4m3 forward, e5m2 backward, margin 2 but --recipe/--lag/--amax-history/"
                                    "--amax-algo/--margin/--formats/--power-of-two-scales/--skip-zero-amax"))
        << option;
    EXPECT_EQ(read_text(metrics), log) << option;
  }
  r = run_train("--epochs 2 --resume --margin 2" + common);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("Resumed fp8 from"));

  log = read_text(metrics);
  std::filesystem::resize_file(dir / "out" / "checkpoint-fp8.safetensors", 100);  // corrupt
  r = run_train("--epochs 3 --resume --margin 2" + common);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_EQ(read_text(metrics), log);
}

// --recipe block: current 1x128 / 128x128 scales, no scaling state in the checkpoint; it resumes under
// the same recipe only.
TEST(TrainCommand, TrainsAndResumesWithBlockScaling) {
  const fp8kit::testing::TempDir dir("train_command");
  const std::string common = " --data " + make_tiny_imdb(dir.path()).string() + " --vocab " +
                             (dir / "vocab.txt").string() + " --out " + (dir / "out").string() +
                             " --batch-size 10 --seed 3 --precision fp8 --recipe block --formats e4m3";
  CommandResult r = run_train("--epochs 1 --inspect-fp8" + common);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("FP8 recipe: block scaling (1x128 activations and gradients, 128x128 weights), "
                                  "e4m3 forward, e4m3 backward"));
  const auto checkpoint = fp8kit::io::read_safetensors(dir / "out" / "checkpoint-fp8.safetensors");
  for (const auto& tensor : checkpoint.tensors) EXPECT_FALSE(tensor.name.ends_with("_amax_history")) << tensor.name;
  r = run_train("--epochs 2 --resume --recipe current" + common.substr(0, common.find(" --recipe")) + " --formats e4m3");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("was trained with recipe block scaling"));
  r = run_train("--epochs 2 --resume" + common);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("Resumed fp8 from"));
}

// A kill during the first checkpoint write leaves only its temporary file: --resume starts from the
// beginning (as --help promises) and removes it; an --out with no trace of a run is still refused.
TEST(TrainCommand, ResumeWithOnlyALeftoverTemporaryFileStartsFromTheBeginning) {
  const fp8kit::testing::TempDir dir("train_command");
  const std::string common = " --data " + make_tiny_imdb(dir.path()).string() +
                             " --vocab " + (dir / "vocab.txt").string() + " --out " + (dir / "out").string() +
                             " --batch-size 8 --seed 3 --precision fp32 --epochs 1 --resume";
  CommandResult r = run_train(common);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr(" holds no checkpoint-fp32.safetensors to resume from"));

  std::filesystem::create_directories(dir / "out");
  const auto leftover = dir / "out" / ".checkpoint-fp32.safetensors.tmp-Q1w2E3";
  std::ofstream(leftover) << std::string(4096, '\0');
  r = run_train(common);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("fp32 starts from the beginning"));
  EXPECT_FALSE(std::filesystem::exists(leftover));
  EXPECT_EQ(fp8kit::io::read_safetensors(dir / "out" / "checkpoint-fp32.safetensors").metadata.at("epoch"), "1");
}

TEST(TrainCommand, AFreshRunRemovesTheCheckpointsOfTheRunItReplaces) {
  // A fresh run empties metrics.jsonl; were the old checkpoint kept and the new run killed before
  // its own first one, --resume would continue the old run with none of its log lines.
  const fp8kit::testing::TempDir dir("train_command");
  const std::string common = " --data " + make_tiny_imdb(dir.path()).string() +
                             " --vocab " + (dir / "vocab.txt").string() + " --out " + (dir / "out").string() +
                             " --batch-size 8 --seed 3 --precision fp32";
  ASSERT_EQ(run_train(common + " --epochs 1").exit_code, 0);
  const auto checkpoint = dir / "out" / "checkpoint-fp32.safetensors";
  ASSERT_TRUE(std::filesystem::exists(checkpoint));
  const CommandResult r = run_train(common + " --epochs 0");  // starts over, writes no checkpoint
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("Starting over: removed " + checkpoint.string()));
  EXPECT_FALSE(std::filesystem::exists(checkpoint));
}

// A value an option does not take fails while parsing (exit 2), before any data is loaded, naming the
// option and its choices as --help lists them.
TEST(TrainCommand, RejectsUnknownChoicesNamingTheOption) {
  const std::vector<std::pair<std::string, std::string>> cases{
      {"--precision fp16", "error: --precision: fp16 not in {fp32,bf16,fp8}"},
      {"--compare bf16,fp4", "error: --compare: fp4 not in {fp32,bf16,fp8}"},
      {"--device tpu", "error: --device: tpu not in {cpu,cuda}"},
      {"--recipe sometimes", "error: --recipe: sometimes not in {delayed,current,block}"},
      {"--lag tf", "error: --lag: tf not in {te,keras}"},
      {"--amax-algo mean", "error: --amax-algo: mean not in {max,most_recent}"},
      {"--formats fp8", "error: --formats: fp8 not in {hybrid,e4m3}"},
      {"--formats e5m2", "error: --formats: e5m2 would need E5M2 x E5M2 GEMMs, which FP8 tensor cores do not run"},
      {"--margin 17", "--margin: must be a whole number from 0 to 16, not '17'"},
      {"--margin -1", "--margin: must be a whole number from 0 to 16, not '-1'"},
      {"--margin 0.5", "--margin: must be a whole number from 0 to 16, not '0.5'"}};
  for (const auto& [option, message] : cases) {
    const CommandResult r = run_train(option + " --data /nonexistent");
    EXPECT_EQ(r.exit_code, 2) << option;
    EXPECT_THAT(r.output, HasSubstr(message)) << option;
    EXPECT_THAT(r.output, HasSubstr("(see `fp8kit train --help`)")) << option;
    EXPECT_THAT(r.output, ::testing::Not(HasSubstr("/nonexistent"))) << option;
  }
  const CommandResult r = run_train("--compare bf16,bf16");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("--compare lists bf16 twice"));

  const std::string help = run_train("--help").output;
  for (const char* choices : {"{cpu,cuda}", "{fp32,bf16,fp8}", "{delayed,current,block}", "{te,keras}",
                              "{max,most_recent}", "{hybrid,e4m3}"}) {
    EXPECT_THAT(help, HasSubstr(choices));
  }
}

TEST(TrainCommand, RejectsConflictingAndMalformedOptions) {
  EXPECT_EQ(run_train("--precision fp8 --compare bf16,fp8").exit_code, 2);
  EXPECT_EQ(run_train("--batch-size 0").exit_code, 2);
  EXPECT_EQ(run_train("--epochs -1").exit_code, 2);
  EXPECT_EQ(run_train("--data").exit_code, 2);
}

// An --out that cannot be a folder fails before the data is read (here it does not exist), naming --out.
TEST(TrainCommand, RejectsAnOutThatIsAFileBeforeLoadingData) {
  const fp8kit::testing::TempDir dir("train_command_out_file");
  std::ofstream(dir / "file") << "x";
  CommandResult r = run_train("--data /nonexistent --out " + (dir / "file").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("error: --out " + (dir / "file").string() + " is a file, not a folder"));
  r = run_train("--data /nonexistent --out " + (dir / "file" / "run").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("is a file, so the folder cannot be made"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("/nonexistent")));
}

// Without the CUDA backend or without a GPU, --device cuda fails with one clear line; with both it
// trains (the tiny set's last batch of 4 takes a second CUDA graph).
TEST(TrainCommand, DeviceCudaTrainsOrSaysWhyNot) {
  std::FILE* pipe = ::popen((std::string(FP8KIT_CLI) + " device 2>&1").c_str(), "r");
  std::string devices;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) devices.append(buffer, n);
  ::pclose(pipe);
  const fp8kit::testing::TempDir dir("train_command_cuda");
  const CommandResult r = run_train("--device cuda --compare bf16,fp8 --epochs 1 --batch-size 8 --data " +
                                    make_tiny_imdb(dir.path()).string() + " --vocab " + (dir / "vocab.txt").string() +
                                    " --out " + (dir / "out").string());
  // Without the CUDA backend or a GPU, `fp8kit device` says why, and train --device cuda the same.
  const size_t error = devices.find("error: ");
  if (error != std::string::npos) {
    const std::string why = devices.substr(error + 7, devices.find('\n', error) - error - 7);
    EXPECT_EQ(r.exit_code, 1);
    EXPECT_THAT(r.output, HasSubstr("error: --device cuda: " + why));
  } else {
    ASSERT_EQ(r.exit_code, 0) << tail(r.output);
    EXPECT_THAT(r.output, HasSubstr("3/3 ━━━━━━━━━━━━━━━━━━━━"));
    EXPECT_TRUE(std::filesystem::exists(dir / "out" / "checkpoint-fp8.safetensors"));
  }
}

TEST(TrainCommand, ResumeNeedsACheckpoint) {
  const CommandResult r = run_train("--compare bf16,fp8 --resume --out /nonexistent/run");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("--resume: /nonexistent/run holds no checkpoint-{bf16,fp8}.safetensors"));
}

TEST(TrainCommand, ReportsAMissingDataPath) {
  const CommandResult r = run_train("--data /nonexistent/aclImdb_v1.tar.gz");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("/nonexistent/aclImdb_v1.tar.gz"));
}

// Any class-folder dataset with train/ and test/ is named by its path, and its vocabulary is cached
// under its own name; a bad cached copy may be deleted to relearn it.
TEST(TrainCommand, NamesTheDatasetByItsPathAndCachesItsVocabularyUnderItsName) {
  const fp8kit::testing::TempDir dir("train_command_dataset");
  const std::filesystem::path data = make_tiny_imdb(dir.path(), "movies");
  const std::string environment = "XDG_CACHE_HOME='" + (dir / "cache").string() + "' ";
  const std::string args = "--epochs 0 --batch-size 8 --data " + data.string() + " --out " + (dir / "out").string();
  CommandResult r = run_train(args, environment);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("Loading " + data.string() + "\n  20 training, 4 validation, 12 test texts ("));
  EXPECT_THAT(r.output, HasSubstr("tokenized 36 texts to 200 ids each"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("review")));
  std::vector<std::filesystem::path> cached;
  for (const auto& entry : std::filesystem::directory_iterator(dir / "cache" / "fp8kit")) cached.push_back(entry.path());
  ASSERT_EQ(cached.size(), 1u);
  EXPECT_THAT(cached[0].filename().string(), ::testing::MatchesRegex("vocab-movies-20000-[0-9a-f]{16}\\.txt"));
  EXPECT_THAT(r.output, HasSubstr("caching it in " + cached[0].string()));

  r = run_train(args, environment);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("Reading the WordPiece vocabulary from " + cached[0].string()));

  std::ofstream(cached[0]) << "[UNK]\n[PAD]\nthe\n";
  r = run_train(args, environment);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("error: cached vocabulary " + cached[0].string() +
                                  " has \"[UNK]\" at id 0 where the reserved token [PAD] belongs: delete it to relearn"));
}

// A --vocab that is not a vocab.txt fails before the data is loaded.
TEST(TrainCommand, RefusesABadVocabularyBeforeLoadingData) {
  const fp8kit::testing::TempDir dir("train_command_bad_vocab");
  const std::string data = make_tiny_imdb(dir.path()).string();
  std::filesystem::create_directories(dir / "folder");
  std::ofstream(dir / "empty.txt").flush();
  std::ofstream(dir / "tokenizer.json") << R"({"model": {"type": "BPE", "vocab": {}}})";
  const std::vector<std::pair<std::string, std::string>> cases{
      {"folder", "is not a regular file (a folder, device or pipe)"},
      {"empty.txt", "is empty"},
      {"tokenizer.json", "is JSON (a tokenizer.json?"}};
  for (const auto& [name, problem] : cases) {
    const std::string vocab = (dir / name).string();
    const CommandResult r = run_train("--epochs 0 --data " + data + " --vocab " + vocab + " --out " +
                                      (dir / "out").string());
    EXPECT_EQ(r.exit_code, 1) << name;
    EXPECT_THAT(r.output, HasSubstr("error: vocabulary file " + vocab + " " + problem)) << name;
    EXPECT_THAT(r.output, ::testing::Not(HasSubstr("Loading "))) << name;
  }
}

// The user's own --vocab is never to be deleted: the error says what is wrong and how to fix it.
TEST(TrainCommand, SaysHowToFixAUserVocabularyWithoutTheReservedTokensFirst) {
  const fp8kit::testing::TempDir dir("train_command_user_vocab");
  const std::string vocab = (dir / "vocab.txt").string();
  std::ofstream(vocab) << "[PAD]\nthe\n[UNK]\n";
  const CommandResult r = run_train("--epochs 0 --data " + make_tiny_imdb(dir.path()).string() + " --vocab " + vocab +
                                    " --out " + (dir / "out").string());
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("error: vocabulary " + vocab +
                                  " has \"the\" at id 1 where the reserved token [UNK] belongs: pass a vocabulary whose "
                                  "first lines are the reserved tokens [PAD], [UNK] (ids 0 to 1), or pick a --vocab path "
                                  "that does not exist yet to learn a new one there"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("delete")));
}

// A batch larger than the memory there is fails before training, saying both amounts. The address
// space limit (ulimit -v) stands in for a small machine; one thread keeps fp8kit's own mappings small.
TEST(TrainCommand, RefusesABatchThatDoesNotFitInMemory) {
  const std::string limited = "ulimit -v 1000000 && OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 ";
  if (std::system((limited + FP8KIT_CLI + " formats >/dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << "fp8kit does not start under ulimit -v (a sanitizer build?)";
  }
  const fp8kit::testing::TempDir dir("train_command_memory");
  const std::string args = "--epochs 1 --batch-size 4096 --data " + make_tiny_imdb(dir.path(), "aclImdb", 600).string() +
                           " --vocab " + (dir / "vocab.txt").string() + " --out " + (dir / "out").string();
  const CommandResult r = run_train(args, limited);
  EXPECT_EQ(r.exit_code, 1) << tail(r.output);
  EXPECT_THAT(r.output, ::testing::ContainsRegex("error: a training step on a batch of 1200 texts of 200 tokens needs "
                                                 "about 2\\.1 GiB of memory but [0-9.]+ [KMG]iB is available; pass a "
                                                 "smaller --batch-size"));
  EXPECT_THAT(r.output, ::testing::Not(HasSubstr("Epoch 1/1")));
}

}  // namespace

// --health-every N: the FP8 run's metrics log gets a health event at every N-th step (and the last) naming all 24 FP8
// tensors of the seed model, and `fp8kit report` makes its page; 0 records none.
TEST(TrainCommand, RecordsHealthForTheReport) {
  const fp8kit::testing::TempDir dir("train_command_health");
  const std::string common = " --data " + make_tiny_imdb(dir.path()).string() + " --vocab " +
                             (dir / "vocab.txt").string() + " --batch-size 8 --seed 3 --epochs 2";
  CommandResult r = run_train("--compare bf16,fp8 --health-every 2 --out " + (dir / "on").string() + common);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  std::vector<nlohmann::json> health;
  std::ifstream metrics(dir / "on" / "metrics.jsonl");
  for (std::string line; std::getline(metrics, line);) {
    nlohmann::json e = nlohmann::json::parse(line);
    if (e["event"] == "run") {
      EXPECT_EQ(e["health_every"], 2);
    }
    if (e["event"] == "health") health.push_back(std::move(e));
  }
  ASSERT_EQ(health.size(), 3u);  // steps 2, 4 and 6 of 3 per epoch, fp8 only
  for (size_t i = 0; i < health.size(); ++i) {
    EXPECT_EQ(health[i]["precision"], "fp8");
    EXPECT_EQ(health[i]["step"], 2 * (i + 1));
    EXPECT_EQ(health[i]["tensors"].size(), 24u);
  }
  const std::string page = (dir / "page.html").string();
  const std::string report = std::string(FP8KIT_CLI) + " report " + (dir / "on").string() + " --out " + page;
  ASSERT_EQ(std::system(report.c_str()), 0);
  const std::string html = read_text(page);
  EXPECT_THAT(html, HasSubstr("transformer_decoder/self_attention/query/inputs"));
  EXPECT_THAT(html, HasSubstr(">Accuracy<"));

  r = run_train("--precision fp8 --health-every 0 --out " + (dir / "off").string() + common);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  std::ifstream off(dir / "off" / "metrics.jsonl");
  for (std::string line; std::getline(off, line);) EXPECT_EQ(line.find("\"health\""), std::string::npos);
}
