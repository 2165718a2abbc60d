// The local launcher: fork/exec per rank, a polling wait that forwards signals and stops the job
// when one rank fails.
#include "dist/launch.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
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
      {"MASTER_ADDR", "127.0.0.1"},             {"MASTER_PORT", std::to_string(port)},
      {"FP8KIT_LAUNCHER", "fp8kit --procs"}};
  std::vector<std::string> env;
  bool nvls_set = false, threads_set = false;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view entry(*e);
    const std::string_view key = entry.substr(0, entry.find('='));
    nvls_set = nvls_set || key == "NCCL_NVLS_ENABLE";
    threads_set = threads_set || key == "OMP_NUM_THREADS";
    bool replaced = false;
    for (const auto& [name, value] : set) replaced = replaced || key == name;
    if (!replaced) env.emplace_back(entry);
  }
  for (const auto& [name, value] : set) env.push_back(name + "=" + value);
  if (!nvls_set) env.emplace_back("NCCL_NVLS_ENABLE=0");
  // N processes of OpenMP threads for every core would fight over the cores: a share each.
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  if (!threads_set) env.push_back(fmt::format("OMP_NUM_THREADS={}", std::max(1u, cores / unsigned(processes))));
  return env;
}

// The ranks' stdout and stderr, read from pipes and written to this process's own with "[rank N] "
// before each line.
class PrefixedOutput {
 public:
  // The pipe a child of `rank` writes `target` (STDOUT_FILENO or STDERR_FILENO) into; returns its
  // write end, for the child to dup2 (both ends close on exec: no other rank inherits them).
  int add(int rank, int target) {
    int fds[2];
    FP8KIT_CHECK(pipe2(fds, O_CLOEXEC) == 0, "launch_local: cannot make a pipe: {}", strerror(errno));
    streams_.push_back({fds[0], target, fmt::format("[rank {}] ", rank), {}});
    write_ends_.push_back(fds[1]);
    return fds[1];
  }
  // After the fork: the parent's copies of the write ends go, so that a rank's exit ends its pipes.
  void close_write_ends() {
    for (int fd : write_ends_) close(fd);
    write_ends_.clear();
  }
  // Copies what has arrived, waiting at most timeout_ms for something; false once every pipe is closed.
  bool pump(int timeout_ms) {
    std::vector<pollfd> fds;
    for (const Stream& s : streams_)
      if (s.fd >= 0) fds.push_back({s.fd, POLLIN, 0});
    if (fds.empty()) return false;
    if (poll(fds.data(), fds.size(), timeout_ms) <= 0) return true;
    for (Stream& s : streams_) {
      const auto it = std::ranges::find(fds, s.fd, &pollfd::fd);
      if (s.fd < 0 || it == fds.end() || it->revents == 0) continue;
      char buffer[65536];
      const ssize_t n = read(s.fd, buffer, sizeof buffer);
      if (n > 0) {
        s.pending.append(buffer, static_cast<size_t>(n));
        for (size_t end; (end = s.pending.find('\n')) != std::string::npos; s.pending.erase(0, end + 1))
          emit(s, s.pending.substr(0, end + 1));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        if (!s.pending.empty()) emit(s, s.pending + "\n");
        s.pending.clear();
        close(s.fd);
        s.fd = -1;
      }
    }
    return true;
  }
  ~PrefixedOutput() {
    close_write_ends();
    for (const Stream& s : streams_)
      if (s.fd >= 0) close(s.fd);
  }

 private:
  struct Stream {
    int fd;
    int target;
    std::string prefix;
    std::string pending;  // a line not ended yet
  };
  static void emit(const Stream& s, const std::string& line) {
    const std::string out = s.prefix + line;
    for (size_t done = 0; done < out.size();) {
      const ssize_t n = write(s.target, out.data() + done, out.size() - done);
      if (n <= 0 && errno != EINTR) return;  // our own output is gone: nothing to tell it to
      if (n > 0) done += static_cast<size_t>(n);
    }
  }

  std::vector<Stream> streams_;
  std::vector<int> write_ends_;
};

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

}  // namespace

std::string current_executable() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

std::vector<std::string> current_arguments() {
  std::ifstream in("/proc/self/cmdline", std::ios::binary);
  FP8KIT_CHECK(in.good(), "cannot read /proc/self/cmdline: launching local processes needs Linux's /proc");
  std::vector<std::string> args;
  for (std::string arg; std::getline(in, arg, '\0');) args.push_back(arg);
  return args;
}

void launch_local(const std::vector<std::string>& argv, const LaunchOptions& options) {
  FP8KIT_CHECK(!argv.empty(), "launch_local: no command to run");
  FP8KIT_CHECK(options.processes >= 1, "launch_local: {} processes; at least 1 is needed", options.processes);
  const int port = options.master_port != 0 ? options.master_port : free_tcp_port();
  ForwardSignals forward;
  std::vector<std::string> args = argv;
  std::vector<char*> arg_pointers = pointers(args);
  std::vector<pid_t> pids;  // by rank; 0 once reaped
  PrefixedOutput output;
  const pid_t parent = getpid();
  for (int rank = 0; rank < options.processes; ++rank) {
    // Everything the child needs is made before fork: between fork and exec only async-signal-safe calls.
    std::vector<std::string> env = rank_environment(rank, options.processes, port);
    std::vector<char*> env_pointers = pointers(env);
    const int out = options.prefix_output ? output.add(rank, STDOUT_FILENO) : -1;
    const int err = options.prefix_output ? output.add(rank, STDERR_FILENO) : -1;
    const pid_t pid = fork();
    if (pid == 0) {
      if (out >= 0 && (dup2(out, STDOUT_FILENO) < 0 || dup2(err, STDERR_FILENO) < 0)) _exit(127);
      setpgid(0, 0);
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != parent) _exit(128 + SIGTERM);  // the launcher died before prctl
      execvpe(arg_pointers[0], arg_pointers.data(), env_pointers.data());
      const char* why = strerror(errno);
      const std::initializer_list<const char*> message = {"error: cannot run ", arg_pointers[0], ": ", why, "\n"};
      for (const char* part : message)
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
  output.close_write_ends();

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
    if (!reaped && !output.pump(20)) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // What the ranks wrote last (a process they started may hold a pipe open: not past a second).
  for (const auto end = Clock::now() + std::chrono::seconds(1); Clock::now() < end && output.pump(20);) {
  }
  if (failure) fail("{}: stopped the other ranks", *failure);
}

}  // namespace fp8kit::dist
