// Collectives over a job's processes for data-parallel training: all-reduce (sum, or max for FP8
// amaxes) and broadcast of flat f32/bf16 Tensors, queued on an ops::Context's current lane like an
// op. Two backends: nccl (CUDA tensors; asynchronous on the lane's stream, so it overlaps other lanes'
// work and can be captured in a CUDA graph) and tcp (CPU tensors, over the store's sockets; done when
// the call returns: CPU data-parallel training, and multi-process tests without GPUs).
#pragma once

#include <chrono>
#include <memory>
#include <string_view>

#include "dist/rendezvous.h"
#include "dist/store.h"
#include "ops/context.h"
#include "tensor/tensor.h"

namespace fp8kit::dist {

enum class Backend : uint8_t { Tcp, Nccl };
std::string_view name(Backend backend);  // "tcp", "nccl"
Backend parse_backend(std::string_view text);  // "tcp" | "nccl"; anything else throws
// tcp for the CPU, nccl for CUDA.
Backend default_backend(Device device);
// Whether this build has the nccl backend (CUDA and NCCL found at configure time).
bool nccl_available();

enum class ReduceOp : uint8_t { Sum, Max };

enum class Collective : uint8_t { AllReduce, Broadcast, ReduceScatter, AllGather };
std::string_view name(Collective call);  // "all_reduce", ...

// The elements of the tensors this rank has passed to each collective (the whole tensor, also for
// reduce_scatter and all_gather), by Collective. A ring moves (W - 1) / W of them per rank and call
// for reduce_scatter and all_gather, twice that for all_reduce.
struct Traffic {
  int64_t elements[4] = {};
  int64_t operator[](Collective call) const { return elements[static_cast<int>(call)]; }
};

struct CommunicatorOptions {
  // The store's timeout (connecting, host-side calls), NCCL's initialization and wait()'s: past it,
  // the call throws (NCCL: after aborting the communicator) instead of hanging.
  std::chrono::milliseconds timeout = std::chrono::seconds(300);
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  const Rendezvous& rendezvous() const { return rendezvous_; }
  int rank() const { return rendezvous_.rank; }
  int world_size() const { return rendezvous_.world_size; }
  int local_rank() const { return rendezvous_.local_rank; }
  virtual Backend backend() const = 0;
  // Where its tensors live: Cpu for tcp, Cuda for nccl.
  virtual Device device() const = 0;

  // In place, on every rank: `tensor` (F32 or Bf16, contiguous, the same shape on every rank, on
  // device()) becomes the elementwise sum or max over the ranks, the same bits on every rank. Queued
  // on c's current lane. Max propagates NaN (an overflowed amax stays visible). tcp sums in rank
  // order ((x0 + x1) + x2) + ... in float32 (bf16: rounded once at the end).
  virtual void all_reduce(ops::Context& c, Tensor& tensor, ReduceOp op) = 0;
  // Rank 0's `tensor` into every rank's (same requirements), queued on c's current lane.
  virtual void broadcast(ops::Context& c, Tensor& tensor) = 0;
  // ZeRO-1's halves, in place over a tensor of world_size() equal shards (numel divisible by the world
  // size; shard r is elements [r n / W, (r + 1) n / W)). reduce_scatter: this rank's shard becomes the
  // sum or max over the ranks of that shard (the gradients its optimizer state covers); the other
  // shards' contents are unspecified after it (tcp leaves them as they were). all_gather: shard r of
  // every rank becomes rank r's shard (the parameters each rank updated). Queued on c's current lane.
  virtual void reduce_scatter(ops::Context& c, Tensor& tensor, ReduceOp op) = 0;
  virtual void all_gather(ops::Context& c, Tensor& tensor) = 0;
  // Waits for the collectives queued on c's current lane so far (nccl: polls NCCL's asynchronous
  // errors; on one, or when the timeout passes, aborts the communicator and throws, naming the rank).
  // It also ends when the store hears that a rank died (Store::poll_failure). Call it where the host
  // would otherwise wait for the stream (reading the loss), so that a dead rank ends the job instead
  // of hanging it. tcp: returns at once.
  virtual void wait(ops::Context& c) = 0;

  // Host-side calls over the store: returns when every rank has called it.
  void barrier() { store_->barrier(); }
  Store& store() { return *store_; }

  // What the collectives called so far were given (what a data-parallel step sends, for tests).
  const Traffic& traffic() const { return traffic_; }

 protected:
  Communicator(const Rendezvous& r, std::unique_ptr<Store> store) : rendezvous_(r), store_(std::move(store)) {}

  // For the backends, first in every collective: throws when `tensor` cannot go through `call`
  // (another device, a dtype other than f32 or bf16; reduce_scatter and all_gather: a numel the world
  // size does not divide), then counts it in traffic().
  void prepare(Collective call, const Tensor& tensor);

 private:
  Rendezvous rendezvous_;
  std::unique_ptr<Store> store_;
  Traffic traffic_;
};

// Joins the job that `r` describes (read_rendezvous()): connects the store, then the backend. nccl
// first makes GPU local_rank the current device (GPU 0 when only one is visible), so call it before
// any other CUDA work of the process. Every rank must call it; it returns when all have.
std::unique_ptr<Communicator> connect(const Rendezvous& r, Backend backend, CommunicatorOptions options = {});

}  // namespace fp8kit::dist
