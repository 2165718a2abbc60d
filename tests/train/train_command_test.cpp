// `fp8kit train` end to end on a tiny generated aclImdb folder (--compare, checkpoints, metrics,
// --resume), and its refusal of bad options before loading any data.
#include "common/temp_dir.h"
#include "io/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <sys/wait.h>

namespace {

using ::testing::HasSubstr;

struct CommandResult {
  int exit_code;
  std::string output;  // stdout and stderr
};

CommandResult run_train(const std::string& args) {
  const std::string command = std::string(FP8KIT_CLI) + " train " + args + " 2>&1";
  std::FILE* pipe = ::popen(command.c_str(), "r");
  std::string output;
  char buffer[4096];
  while (size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
  const int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, output};
}

std::string tail(const std::string& text) { return text.substr(text.size() > 1500 ? text.size() - 1500 : 0); }

// aclImdb/{train,test}/{neg,pos}/<i>_<rating>.txt with short reviews built from telling words.
std::filesystem::path make_tiny_imdb(const std::filesystem::path& dir) {
  std::mt19937 rng(0);
  const std::vector<std::string> positive{"great", "wonderful", "excellent", "loved", "amazing", "superb"};
  const std::vector<std::string> negative{"awful", "terrible", "boring", "hated", "worst", "dull"};
  const std::vector<std::string> common{"the", "movie", "film", "was", "and", "a", "of", "it", "this"};
  for (const auto& [split, count] : {std::pair<std::string, int>{"train", 12}, {"test", 6}}) {
    for (const std::string label : {"neg", "pos"}) {
      const auto folder = dir / "aclImdb" / split / label;
      std::filesystem::create_directories(folder);
      std::vector<std::string> words = label == "pos" ? positive : negative;
      words.insert(words.end(), common.begin(), common.end());
      for (int i = 0; i < count; ++i) {
        std::ofstream file(folder / (std::to_string(i) + (label == "pos" ? "_8.txt" : "_2.txt")));
        for (int w = 0; w < 30; ++w) file << words[rng() % words.size()] << ' ';
        file << ". <br /><br />";
      }
    }
  }
  return dir / "aclImdb";
}

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
  EXPECT_EQ(lines, 2 * (1 + 2 * 2));  // per invocation: the run, then per precision an epoch and a test

  r = run_train("--precision fp8 --epochs 3 --resume --lag keras" + common);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("was trained with recipe delayed scaling, te lag"));
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
  EXPECT_THAT(r.output, HasSubstr("holds no checkpoint-{fp32}.safetensors to resume from"));

  std::filesystem::create_directories(dir / "out");
  const auto leftover = dir / "out" / ".checkpoint-fp32.safetensors.tmp-Q1w2E3";
  std::ofstream(leftover) << std::string(4096, '\0');
  r = run_train(common);
  ASSERT_EQ(r.exit_code, 0) << tail(r.output);
  EXPECT_THAT(r.output, HasSubstr("fp32 starts from the beginning"));
  EXPECT_FALSE(std::filesystem::exists(leftover));
  EXPECT_EQ(fp8kit::io::read_safetensors(dir / "out" / "checkpoint-fp32.safetensors").metadata.at("epoch"), "1");
}

TEST(TrainCommand, RejectsUnknownPrecisionsRecipesAndLags) {
  CommandResult r = run_train("--precision fp4 --out /nonexistent");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("error: "));
  EXPECT_THAT(r.output, HasSubstr("fp4"));
  r = run_train("--compare bf16,bf16");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("--compare lists bf16 twice"));
  r = run_train("--recipe sometimes");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("sometimes"));
  r = run_train("--lag tf");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("tf"));
}

TEST(TrainCommand, RejectsConflictingAndMalformedOptions) {
  EXPECT_EQ(run_train("--precision fp8 --compare bf16,fp8").exit_code, 2);
  EXPECT_EQ(run_train("--batch-size 0").exit_code, 2);
  EXPECT_EQ(run_train("--epochs -1").exit_code, 2);
  EXPECT_EQ(run_train("--data").exit_code, 2);
}

TEST(TrainCommand, RejectsAnUnknownDevice) {
  const CommandResult r = run_train("--device tpu");
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_THAT(r.output, HasSubstr("--device must be cpu or cuda, not tpu"));
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

}  // namespace
