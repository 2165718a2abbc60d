// Runs a step that a model queues on an ops::Context: on the CPU, as it is, every time; on a CUDA
// GPU eagerly the first time (so every buffer and scratch it needs is allocated, and cuBLASLt's plans
// are made), captured as one CUDA graph the second time, and replayed with one launch after that.
#pragma once

#include "ops/context.h"

#include <functional>
#include <memory>

namespace fp8kit::exec {

class CapturedStep {
 public:
  // `step` must queue the same work every time (same shapes, same buffers): a different batch size
  // needs another CapturedStep. Every lane it forks is joined back into Main at its end.
  explicit CapturedStep(std::function<void(ops::Context&)> step);
  ~CapturedStep();
  CapturedStep(CapturedStep&&) noexcept;
  CapturedStep& operator=(CapturedStep&&) noexcept;

  // Queues one step (asynchronous on the GPU; Context::synchronize waits).
  void run(ops::Context& context);
  bool captured() const;

 private:
  struct Graph;
  std::function<void(ops::Context&)> step_;
  int runs_ = 0;
  std::unique_ptr<Graph> graph_;
};

}  // namespace fp8kit::exec
