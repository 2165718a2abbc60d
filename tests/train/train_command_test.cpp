// `fp8kit train` refuses bad options before loading any data, with a message and a non-zero exit.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdio>
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
