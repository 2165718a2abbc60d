// A small TCP store for a job's processes (POSIX sockets, a star around rank 0): what NCCL's unique
// id, host-side checks and the tcp backend's all-reduce travel through. Every call is collective:
// every rank makes the same calls in the same order, from one thread. Every blocking call ends within
// the timeout,
// and a rank that leaves (its process ended: its socket closed) fails the others' next call with a
// message naming it, instead of a hang.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "dist/rendezvous.h"

namespace fp8kit::dist {

struct StoreOptions {
  // How long rank 0 waits for the other ranks (to connect, to arrive at a call); the others wait for
  // rank 0 this long plus a tenth (at least 1 s), so that rank 0's report of who is missing reaches
  // them before their own timeout.
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
};

class Store {
 public:
  using Blob = std::vector<std::byte>;

  // Rank 0 listens on r.master_port (every interface) and waits for the other ranks; they connect to
  // r.master_addr:r.master_port, retrying until the timeout. Returns when every rank has connected
  // (a first barrier). World size 1: no sockets, and every call returns at once.
  explicit Store(const Rendezvous& r, StoreOptions options = {});
  ~Store();
  Store(const Store&) = delete;
  Store& operator=(const Store&) = delete;

  int rank() const { return rank_; }
  int world_size() const { return world_size_; }
  std::chrono::milliseconds timeout() const { return options_.timeout; }

  // Rank 0's `data` on every rank (the others' argument is ignored).
  Blob broadcast(std::span<const std::byte> data);
  // Rank 0: every rank's `data`, by rank; the others: nothing (they return once theirs is sent).
  std::vector<Blob> gather(std::span<const std::byte> data);
  // Every rank's `data`, by rank, on every rank.
  std::vector<Blob> allgather(std::span<const std::byte> data);
  // Returns when every rank has called it.
  void barrier();
  // Ends the store for every rank: throws fp8kit::Error(message) here, and the other ranks' current
  // or next call throws it too (rank 0 sends it to them; another rank's closed socket tells rank 0,
  // which names it). For a rank that finds the job inconsistent (e.g. sizes that differ by rank).
  [[noreturn]] void abort(const std::string& message);
  // Without waiting, between calls: the failure this rank has heard of (a rank whose connection
  // closed, a report that abort() sent), or "" when none. What rank 0 finds it relays to the others, as
  // abort() does. For a host loop that waits on something else (the GPU's collectives), so that a rank
  // that died ends it at once. A job's ranks therefore end with a last barrier(): a rank that returns
  // early looks, to a rank still polling, as one that died.
  std::string poll_failure();

 private:
  struct Peer;
  enum class Op : uint8_t;
  template <typename F>
  auto collective(Op op, F&& body);
  void accept_ranks(int port);  // rank 0
  void join(const Rendezvous& r, std::chrono::steady_clock::time_point connect_deadline);  // the others
  void send(Peer& peer, uint8_t kind, std::span<const std::byte> data);
  std::vector<Blob> receive(std::span<Peer*> peers);
  void fail_all(const std::string& message);

  int rank_ = 0;
  int world_size_ = 1;
  StoreOptions options_;
  std::vector<Peer> peers_;  // rank 0: ranks 1..N-1 (peers_[r - 1]); the others: rank 0
  Op op_{};                  // the call in progress, and its number: every frame carries both
  uint32_t sequence_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  std::string failure_;  // after a failed call, every later call throws this
};

// A TCP port that nothing listens on now (the kernel's pick for port 0), for a job on this host.
int free_tcp_port();

}  // namespace fp8kit::dist
