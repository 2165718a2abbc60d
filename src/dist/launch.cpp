// The local launcher: fork/exec per rank, a polling wait that forwards signals and stops the job
// when one rank fails.
#include "dist/launch.h"

#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string_view>
#include <thread>

#include "base/error.h"
#include "dist/store.h"

extern char** environ;

namespace fp8kit::dist {
namespace {

volatile sig_atomic_t g_forward = 0;  // the last SIGINT/SIGTERM received, to pass on
void remember(int sig) { g_forward = sig; }

// Installs the forwarding handlers for the launcher's lifetime, then puts the old ones back.
class ForwardSignals {
 public:
  ForwardSignals() {
    g_forward = 0;
    struct sigaction action {};
    action.sa_handler = remember;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, &old_int_);
    sigaction(SIGTERM, &action, &old_term_);
  }
  ~ForwardSignals() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_ {}, old_term_ {};
};

std::string describe(int status) {
  if (WIFEXITED(status)) return fmt::format("exited with code {}", WEXITSTATUS(status));
  const int sig = WTERMSIG(status);
  return fmt::format("was killed by signal {} ({})", sig, strsignal(sig));
}

// This process's environment with the rendezvous variables of one rank in place of any it had.
std::vector<std::string> rank_environment(int rank, int processes, int port) {
  const std::vector<std::pair<std::string, std::string>> set = {
      {"RANK", std::to_string(rank)},           {"WORLD_SIZE", std::to_string(processes)},
      {"LOCAL_RANK", std::to_string(rank)},     {"LOCAL_WORLD_SIZE", std::to_string(processes)},
      {"MASTER_ADDR", "127.0.0.1"},             {"MASTER_PORT", std::to_string(port)}};
  std::vector<std::string> env;
  bool nvls_set = false;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view key = entry.substr(0, entry.find('='));
    nvls_set = nvls_set || key == "NCCL_NVLS_ENABLE";
    bool replaced = false;
    for (const auto& [name, value] : set) replaced = replaced || key == name;
    if (!replaced) env.emplace_back(entry);
  }
  for (const auto& [name, value] : set) env.push_back(name + "=" + value);
  if (!nvls_set) env.emplace_back("NCCL_NVLS_ENABLE=0");
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

std::string current_executable() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

void launch_local(const std::vector<std::string>& argv, const LaunchOptions& options) {
  FP8KIT_CHECK(!argv.empty(), "launch_local: no command to run");
  FP8KIT_CHECK(options.processes >= 1, "launch_local: {} processes; at least 1 is needed", options.processes);
  const int port = options.master_port != 0 ? options.master_port : free_tcp_port();
  ForwardSignals forward;
  std::vector<std::string> args = argv;
  std::vector<char*> arg_pointers = pointers(args);
  std::vector<pid_t> pids;  // by rank; 0 once reaped
  const pid_t parent = getpid();
  for (int rank = 0; rank < options.processes; ++rank) {
    // Everything the child needs is made before fork: between fork and exec only async-signal-safe calls.
    std::vector<std::string> env = rank_environment(rank, options.processes, port);
    std::vector<char*> env_pointers = pointers(env);
    const pid_t pid = fork();
    if (pid == 0) {
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(128 + SIGTERM);  // the launcher died before prctl
      execvpe(arg_pointers[0], arg_pointers.data(), env_pointers.data());
      const char* why = strerror(errno);
      for (const char* part : std::initializer_list<const char*>{"error: cannot run ", arg_pointers[0], ": ", why, "\n"})
        if (write(STDERR_FILENO, part, strlen(part)) < 0) break;
      _exit(127);
    }
    if (pid < 0) {
      const std::string why = strerror(errno);
      for (pid_t p : pids) kill(p, SIGKILL);
      for (pid_t p : pids) waitpid(p, nullptr, 0);
      fail("cannot start rank {} of {}: fork failed: {}", rank, options.processes, why);
    }
    pids.push_back(pid);
  }

  std::optional<std::string> failure;  // the first rank's to fail
  using Clock = std::chrono::steady_clock;
  Clock::time_point kill_at = Clock::time_point::max();  // SIGKILL for those still there
  for (int running = options.processes; running > 0;) {
    if (const int sig = g_forward; sig != 0) {
      g_forward = 0;
      for (pid_t p : pids)
        if (p != 0) kill(p, sig);
    }
    bool reaped = false;
    for (int rank = 0; rank < options.processes; ++rank) {
      int status = 0;
      if (pids[rank] == 0 || waitpid(pids[rank], &status, WNOHANG) != pids[rank]) continue;
      pids[rank] = 0;
      --running;
      reaped = true;
      if (status == 0 || failure) continue;
      failure = fmt::format("rank {} of {} {}", rank, options.processes, describe(status));
      for (pid_t p : pids)
        if (p != 0) kill(p, SIGTERM);
      kill_at = Clock::now() + options.grace;
    }
    if (Clock::now() >= kill_at) {
      for (pid_t p : pids)
        if (p != 0) kill(p, SIGKILL);
      kill_at = Clock::time_point::max();
    }
    if (!reaped) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  if (failure) fail("{}: stopped the other ranks", *failure);
}

}  // namespace fp8kit::dist
