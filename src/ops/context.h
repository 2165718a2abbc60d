// Where and how ops run: the device, the seed and step that dropout masks key on, and on a CUDA GPU
// the streams ("lanes") that ops queue on, with a cuBLASLt context and scratch memory per lane.
// A model queues a step's ops on one Context; the same calls run on the CPU in program order.
#pragma once

#include "runtime/device.h"

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace fp8kit::ops {

// Branches of a step that may run at the same time on the GPU: Main carries what the next op waits
// for; Side what nothing needs before the step ends (weight gradients); A and B independent
// branches beside Main (e.g. key's and value's projections beside query's); Comm a data-parallel
// job's collectives (all of them, in one order on every rank), beside the backward.
enum class Lane : uint8_t { Main, Side, A, B, Comm };
inline constexpr int kLanes = 5;

class Context {
 public:
  explicit Context(Device device = Device::Cpu, uint64_t seed = 0);
  ~Context();
  Context(Context&&) noexcept;
  Context& operator=(Context&&) noexcept;

  Device device() const { return device_; }
  bool is_cuda() const { return device_ == Device::Cuda; }
  uint64_t seed() const { return seed_; }

  // The step whose dropout masks ops draw. CUDA: a counter in device memory that ops read when they
  // run, so a captured step replays with the current one (advance_step queues its increment).
  uint64_t step() const { return step_; }
  void set_step(uint64_t step);
  // Queues step + 1 (on the GPU: on the device, in stream order).
  void advance_step();
  // The device counter has been advanced by n (by a kernel that does it beside its own work, or by
  // a replayed CUDA graph): the host's copy follows.
  void count_steps(uint64_t n) { step_ += n; }

  // The lane ops are queued on now (Main unless inside an OnLane).
  Lane lane() const { return lane_; }
  // `lane` waits for the work queued on Main so far / Main waits for the work queued on `lane` so far
  // (nothing to wait for when `lane` was not forked since the last join_all). CPU: nothing to do (ops
  // run in program order).
  void fork(Lane lane);
  void join(Lane lane);
  // Main waits for every lane forked since the last join_all: the end of a step (a captured graph
  // needs every branch joined, and only branches forked inside it).
  void join_all();
  // `lane` waits for the work queued so far on Main and on every lane forked since the last join_all,
  // without making Main wait (join_all joins it back): what `lane` queues next sees everything queued
  // before, while the step goes on (a bucket of final gradients all-reduced beside the backward).
  void follow_all(Lane lane);
  // A point in one lane's work that another lane waits for, without waiting for everything queued on
  // that lane (what join does): record() marks the current lane's work so far, wait() makes the
  // current lane wait for the last record(). Default-constructed; its event is made at the first
  // record. CPU: nothing to do.
  class Marker {
   public:
    Marker() = default;

   private:
    friend class Context;
    int index_ = -1;
  };
  void record(Marker& marker);
  void wait(const Marker& marker);

  // Ops queued while an OnLane lives go to its lane.
  class OnLane {
   public:
    OnLane(Context& context, Lane lane) : context_(context), previous_(context.lane_) { context.lane_ = lane; }
    ~OnLane() { context_.lane_ = previous_; }
    OnLane(const OnLane&) = delete;
    OnLane& operator=(const OnLane&) = delete;

   private:
    Context& context_;
    Lane previous_;
  };

  // Device scratch of at least `bytes` for the current lane, 256-byte aligned, valid until the next
  // call on that lane (work queued on one lane runs in order, so one buffer serves its ops in turn).
  // It grows only outside a graph capture: a captured step gets its scratch sized by the eager
  // step before it.
  void* scratch(size_t bytes);
  // How many times a lane's scratch has grown (and moved): a captured graph made before the last
  // growth reads freed memory and must be captured again.
  uint64_t scratch_generation() const { return scratch_generation_; }

  // Waits for all queued work (GPU); CPU: returns at once.
  void synchronize();

  // The CUDA state (streams, events, cuBLASLt contexts, the step counter): ops/cuda/context.h.
  struct Cuda;
  Cuda& cuda();

 private:
  Device device_;
  uint64_t seed_;
  uint64_t step_ = 0;
  uint64_t scratch_generation_ = 0;
  Lane lane_ = Lane::Main;
  std::array<bool, kLanes> forked_{};
  std::unique_ptr<Cuda> cuda_;
};

}  // namespace fp8kit::ops
