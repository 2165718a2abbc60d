// The local launcher: the environment each rank gets, a failing rank stopping the job, signals passed
// on; and a whole job (launcher, rendezvous, store, tcp all-reduce) of this test program's own ranks.
#include "dist/launch.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <thread>

#include "common/error_of.h"
#include "common/read_text.h"
#include "common/temp_dir.h"
#include "dist/communicator.h"

namespace fp8kit::dist {
namespace {

using namespace std::chrono_literals;
using testing::error_of;
using testing::read_text;

// Sets (or, with nullptr, unsets) a variable of this process while it lives.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    if (value != nullptr) setenv(name, value, 1);
    else unsetenv(name);
  }
  ~ScopedEnv() {
    if (old_) setenv(name_, old_->c_str(), 1);
    else unsetenv(name_);
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(Launch, EveryRankGetsItsEnvironment) {
  testing::TempDir dir("launch_env");
  {
    const ScopedEnv threads("OMP_NUM_THREADS", "3");  // kept; NCCL_NVLS_ENABLE, unset, is turned off
    const ScopedEnv nvls("NCCL_NVLS_ENABLE", nullptr);
    launch_local({"/bin/sh", "-c", "echo $RANK $WORLD_SIZE $LOCAL_RANK $LOCAL_WORLD_SIZE $MASTER_ADDR $MASTER_PORT "
                                   "$OMP_NUM_THREADS $NCCL_NVLS_ENABLE > \"$0/rank$RANK\"", dir.path().string()},
                 {.processes = 3, .master_port = 4567});
  }
  for (int rank = 0; rank < 3; ++rank)
    EXPECT_EQ(read_text(dir / ("rank" + std::to_string(rank))),
              fmt::format("{} 3 {} 3 127.0.0.1 4567 3 0\n", rank, rank));
  const ScopedEnv threads("OMP_NUM_THREADS", nullptr);
  launch_local({"/bin/sh", "-c", "echo $OMP_NUM_THREADS > \"$0/threads$RANK\"", dir.path().string()},
               {.processes = 2});
  EXPECT_GE(std::stoi(read_text(dir / "threads1")), 1);
}

TEST(Launch, AFailingRankStopsTheOthersAndIsNamed) {
  // Rank 1 fails at once; the others would run for a minute, and are stopped.
  EXPECT_EQ(error_of([] {
              launch_local({"/bin/sh", "-c", "[ $RANK = 1 ] && exit 3; exec sleep 60"}, {.processes = 3, .grace = 5s});
            }),
            "rank 1 of 3 exited with code 3: stopped the other ranks");
  EXPECT_EQ(error_of([] {
              launch_local({"/bin/sh", "-c", "[ $RANK = 0 ] && kill -SEGV $$; exec sleep 60"}, {.processes = 2});
            }),
            "rank 0 of 2 was killed by signal 11 (Segmentation fault): stopped the other ranks");
  // Both ranks fail at once: whichever the launcher sees first is named.
  EXPECT_THAT(error_of([] { launch_local({"/nonexistent/program"}, {.processes = 2}); }),
              ::testing::MatchesRegex("rank [01] of 2 exited with code .*"));
  EXPECT_EQ(error_of([] { launch_local({"/bin/true"}, {.processes = 2}); }), "no error");
}

TEST(Launch, EachLineSaysWhichRankWroteIt) {
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  launch_local({"/bin/sh", "-c", "echo one; echo warn >&2; printf unended"}, {.processes = 2});
  const std::string out = ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  for (int rank : {0, 1}) {
    EXPECT_NE(out.find(fmt::format("[rank {}] one\n", rank)), std::string::npos) << out;
    EXPECT_NE(out.find(fmt::format("[rank {}] unended\n", rank)), std::string::npos) << out;
    EXPECT_NE(err.find(fmt::format("[rank {}] warn\n", rank)), std::string::npos) << err;
  }
  EXPECT_EQ(out.size(), 2 * (std::string("[rank 0] one\n").size() + std::string("[rank 0] unended\n").size()));
}

TEST(Launch, SigtermIsPassedToTheRanks) {
  testing::TempDir dir("launch_signal");
  const pid_t launcher = fork();
  if (launcher == 0) {
    alarm(60);
    // Each rank says it is ready, then ends with code 7 on SIGTERM.
    const std::string message = error_of([&] {
      launch_local({"/bin/sh", "-c", "trap 'exit 7' TERM; touch \"$0/ready$RANK\"; while :; do sleep 0.05; done",
                    dir.path().string()},
                   {.processes = 2});
    });
    std::ofstream(dir / "message") << message;
    _exit(0);
  }
  while (!std::filesystem::exists(dir / "ready0") || !std::filesystem::exists(dir / "ready1"))
    std::this_thread::sleep_for(10ms);
  kill(launcher, SIGTERM);
  int status = 0;
  waitpid(launcher, &status, 0);
  // Both end with code 7; the message names the one reaped first.
  EXPECT_NE(read_text(dir / "message").find(" of 2 exited with code 7: stopped the other ranks"), std::string::npos)
      << read_text(dir / "message");
}

// Run by the next test as ranks of a launched job (skipped when not launched): sums each rank's
// number over the tcp backend.
TEST(LaunchedJob, AllReduceOverTcp) {
  if (std::getenv("FP8KIT_TEST_LAUNCHED") == nullptr) GTEST_SKIP() << "runs as a rank of Launch.RunsAJobOfThisProgram";
  auto comm = connect(read_rendezvous(), Backend::Tcp, {.timeout = 20s});
  ops::Context c;
  Tensor t({1}, DType::F32);
  t.data<float>()[0] = static_cast<float>(comm->rank() + 1);
  comm->all_reduce(c, t, ReduceOp::Sum);
  EXPECT_EQ(t.data<float>()[0], 6.0f);
  EXPECT_EQ(comm->world_size(), 3);
}

TEST(Launch, RunsAJobOfThisProgram) {
  const ScopedEnv launched("FP8KIT_TEST_LAUNCHED", "1");
  EXPECT_EQ(error_of([] {
              launch_local({current_executable(), "--gtest_filter=LaunchedJob.AllReduceOverTcp", "--gtest_brief=1"},
                           {.processes = 3});
            }),
            "no error");
}

}  // namespace
}  // namespace fp8kit::dist
