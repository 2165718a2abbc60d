// Runs a job's ranks as forked processes of the test program, for the store's and the tcp backend's
// tests: each rank runs `body` and hands back a string (its result, or the message it failed with).
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <string>
#include <vector>

#include "base/error.h"
#include "dist/rendezvous.h"
#include "dist/store.h"

namespace fp8kit::testing {

struct RankOutcome {
  bool ok = false;   // body returned (false: it threw fp8kit::Error, or the process ended otherwise)
  std::string text;  // what body returned, or the error's message
};

// A rendezvous for rank `rank` of `world` on this host, at `port`.
inline dist::Rendezvous local_rendezvous(int rank, int world, int port) {
  return {.rank = rank, .world_size = world, .local_rank = rank, .local_world_size = world,
          .master_addr = "127.0.0.1", .master_port = port, .source = "test"};
}

// Forks `world` processes at a free port; rank r runs body(rendezvous of rank r). A child that hangs
// is killed after 60 s (SIGALRM), so a broken test fails instead of hanging.
inline std::vector<RankOutcome> run_ranks(int world, const std::function<std::string(const dist::Rendezvous&)>& body) {
  const int port = dist::free_tcp_port();
  std::vector<pid_t> pids;
  std::vector<int> pipes;
  for (int rank = 0; rank < world; ++rank) {
    int fds[2];
    if (pipe(fds) != 0) throw Error("pipe failed");
    const pid_t pid = fork();
    if (pid == 0) {
      close(fds[0]);
      alarm(60);
      bool ok = false;
      std::string text;
      try {
        text = body(local_rendezvous(rank, world, port));
        ok = true;
      } catch (const Error& e) {
        text = e.what();
      }
      for (size_t done = 0; done < text.size();) {
        const ssize_t n = write(fds[1], text.data() + done, text.size() - done);
        if (n <= 0) break;
        done += static_cast<size_t>(n);
      }
      _exit(ok ? 0 : 1);
    }
    close(fds[1]);
    pids.push_back(pid);
    pipes.push_back(fds[0]);
  }
  std::vector<RankOutcome> outcomes(world);
  for (int rank = 0; rank < world; ++rank) {
    char buffer[4096];
    for (ssize_t n; (n = read(pipes[rank], buffer, sizeof buffer)) > 0;) outcomes[rank].text.append(buffer, n);
    close(pipes[rank]);
    int status = 0;
    waitpid(pids[rank], &status, 0);
    outcomes[rank].ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  }
  return outcomes;
}

}  // namespace fp8kit::testing
