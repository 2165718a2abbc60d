// A stream's work captured once into an executable CUDA graph, then replayed with one launch (no
// per-kernel launch overhead). The graph owns its executable; nothing is re-captured implicitly.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "runtime/cuda/check.h"

namespace fp8kit::cuda {

// Empty until capture(); move-only.
class Graph {
 public:
  Graph() = default;
  ~Graph() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
  }
  Graph(Graph&& other) noexcept : exec_(std::exchange(other.exec_, nullptr)) {}
  Graph& operator=(Graph&& other) noexcept {
    std::swap(exec_, other.exec_);
    return *this;
  }
  Graph(const Graph&) = delete;
  Graph& operator=(const Graph&) = delete;

  // Captures what record() queues on `stream` (thread-local capture: other threads' CUDA calls are
  // not affected) and instantiates it. If record() throws, the capture is ended and dropped and the
  // exception propagates; the graph stays empty.
  template <typename Record>
  static Graph capture(cudaStream_t stream, Record&& record) {
    cudaGraph_t captured = nullptr;
    FP8KIT_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
    try {
      record();
    } catch (...) {
      cudaStreamEndCapture(stream, &captured);
      if (captured != nullptr) cudaGraphDestroy(captured);
      throw;
    }
    FP8KIT_CUDA_CHECK(cudaStreamEndCapture(stream, &captured));
    Graph graph;
    const cudaError_t status = cudaGraphInstantiate(&graph.exec_, captured, 0);
    cudaGraphDestroy(captured);  // the executable does not need it
    FP8KIT_CUDA_CHECK(status);
    return graph;
  }

  bool empty() const { return exec_ == nullptr; }
  // Queues one replay of the captured work on `stream`.
  void launch(cudaStream_t stream) const { FP8KIT_CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

 private:
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace fp8kit::cuda
