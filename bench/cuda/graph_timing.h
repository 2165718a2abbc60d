// Timing of small GPU kernels as the seed model replays them: a CUDA graph of kCallsPerIteration
// back-to-back calls (no launch overhead between them), CUDA events around each graph launch.
#pragma once

#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include "runtime/cuda/check.h"
#include "runtime/cuda/graph.h"
#include "runtime/cuda/stream.h"

namespace fp8kit::bench {

constexpr int kCallsPerIteration = 50;

// Times a graph of kCallsPerIteration calls of run() (which queues on `stream`) per benchmark
// iteration, after 3 warm-up calls (module load, clocks); reports the time per call.
template <typename Run>
void time_calls(benchmark::State& state, cudaStream_t stream, Run&& run) {
  for (int i = 0; i < 3; ++i) run();
  const cuda::Graph graph = cuda::Graph::capture(stream, [&] {
    for (int i = 0; i < kCallsPerIteration; ++i) run();
  });
  graph.launch(stream);
  const cuda::Event start(true), stop(true);
  for (auto _ : state) {
    FP8KIT_CUDA_CHECK(cudaEventRecord(start.get(), stream));
    graph.launch(stream);
    FP8KIT_CUDA_CHECK(cudaEventRecord(stop.get(), stream));
    state.SetIterationTime(cuda::elapsed_ms(start, stop) * 1e-3 / kCallsPerIteration);
  }
}

}  // namespace fp8kit::bench
