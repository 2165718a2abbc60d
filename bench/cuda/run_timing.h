// Timing of whole steps (a captured graph's replays, or any work queued on a context): the median of
// 3 rounds of back-to-back runs between CUDA events, after warm-up runs (module loads, graph capture,
// clocks).
#pragma once

#include <algorithm>
#include <functional>
#include <vector>

#include "ops/cuda/context.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/stream.h"

namespace fp8kit::bench {

// Seconds per run of `run` (queued on c): the median of 3 rounds of `runs`, after `warmup` runs.
inline double time_runs(ops::Context& c, int runs, const std::function<void()>& run, int warmup = 10) {
  for (int i = 0; i < warmup; ++i) run();
  c.synchronize();
  const cuda::Event begin(true), end(true);
  std::vector<double> seconds;
  for (int round = 0; round < 3; ++round) {
    FP8KIT_CUDA_CHECK(cudaEventRecord(begin.get(), ops::stream(c)));
    for (int i = 0; i < runs; ++i) run();
    FP8KIT_CUDA_CHECK(cudaEventRecord(end.get(), ops::stream(c)));
    c.synchronize();
    seconds.push_back(cuda::elapsed_ms(begin, end) / 1e3 / runs);
  }
  std::sort(seconds.begin(), seconds.end());
  return seconds[1];
}

}  // namespace fp8kit::bench
