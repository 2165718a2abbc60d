// Starting a job's local processes without torchrun: N copies of a command, each with the
// environment read_rendezvous() reads (what `--gpus N` will do with the program itself).
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace fp8kit::dist {

struct LaunchOptions {
  int processes = 1;
  int master_port = 0;  // 0: a free port (free_tcp_port)
  // After one process fails, how long the others get after SIGTERM before SIGKILL.
  std::chrono::milliseconds grace = std::chrono::seconds(10);
  // Each line the ranks write goes to this process's stdout or stderr as "[rank N] line"; false: the
  // ranks write to them directly.
  bool prefix_output = true;
};

// Runs `argv` (argv[0] a path, or a name looked up on PATH) as ranks 0..processes-1 on this host, each
// with RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=127.0.0.1 and MASTER_PORT set (and,
// unless set, NCCL_NVLS_ENABLE=0 and OMP_NUM_THREADS = this host's cores / processes), and waits for all.
// SIGINT and SIGTERM sent to this process are forwarded to them (each runs in its own process group,
// so a terminal's Ctrl-C reaches them once, through here); they get SIGTERM if this process dies.
// When one fails (a non-zero exit code or a signal), the others are stopped and this throws
// fp8kit::Error naming the first rank that failed and how ("rank 1 of 4 exited with code 3").
void launch_local(const std::vector<std::string>& argv, const LaunchOptions& options);

// This program's own path (/proc/self/exe), to launch copies of it.
std::string current_executable();
// This process's command line (/proc/self/cmdline), argv[0] first.
std::vector<std::string> current_arguments();

}  // namespace fp8kit::dist
