// Causal attention kernels (ops/cuda/attention.h) at the seed model's shape: batch 32, seq 200, 2 heads
// of 16, dropout 0.1 on the probabilities (training), fp32 and bf16. Time per call from CUDA events
// around a CUDA graph of 50 back-to-back calls (as the seed model replays them: no launch overhead),
// 100 graph launches per run. Each benchmark's label is an FNV-1a hash of the bytes the
// kernel wrote (out and stats; dq, dk, dv), so two versions of the kernels can be compared bit for bit.
// Run: build/bench/bench_cuda_attention [--benchmark_repetitions=5 --benchmark_report_aggregates_only=true]
#include "ops/cuda/attention.h"

#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "graph_timing.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/device_info.h"
#include "runtime/cuda/stream.h"

namespace {

using namespace fp8kit;
using bench::time_calls;

// Inputs, outputs and the step counter of one attention call, filled with normal(0, 1) values.
struct Buffers {
  ops::AttentionShape shape;
  cuda::DeviceBuffer<float> q, k, v, dout, out, stats, dq, dk, dv;
  cuda::DeviceBuffer<uint64_t> step;

  explicit Buffers(const ops::AttentionShape& s)
      : shape(s), q(count()), k(count()), v(count()), dout(count()), out(count()),
        stats(s.batch * s.heads * s.seq * 2), dq(count()), dk(count()), dv(count()), step(1) {
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (cuda::DeviceBuffer<float>* b : {&q, &k, &v, &dout}) {
      std::vector<float> x(count());
      for (float& e : x) e = normal(rng);
      b->upload(x);
    }
    step.upload(std::vector<uint64_t>{3});
  }
  size_t count() const { return static_cast<size_t>(shape.batch * shape.seq * shape.heads * shape.head_dim); }
};

uint64_t fnv1a(uint64_t h, const cuda::DeviceBuffer<float>& b) {
  for (float f : b.to_host()) {
    uint32_t bits;
    std::memcpy(&bits, &f, 4);
    for (int i = 0; i < 4; ++i) h = (h ^ ((bits >> (8 * i)) & 0xFF)) * 1099511628211ull;
  }
  return h;
}

void attention(benchmark::State& state, bool backward) {
  if (cuda::list_devices().empty()) {
    state.SkipWithError("no CUDA GPU");
    return;
  }
  const bool bf16 = state.range(0) != 0;
  Buffers b({32, 200, 2, 16});
  const cuda::DropoutSite site{5, b.step.data(), 1, 0.1f, true};
  const cuda::Stream owned;
  const cudaStream_t stream = owned.get();
  const auto forward = [&] {
    cuda::causal_attention_forward(b.shape, b.q.data(), b.k.data(), b.v.data(), site, bf16, b.stats.data(),
                                   b.out.data(), stream);
  };
  cuda::DeviceBuffer<uint8_t> scratch(cuda::causal_attention_backward_workspace(b.shape));
  const auto run_backward = [&] {
    cuda::causal_attention_backward(b.shape, b.q.data(), b.k.data(), b.v.data(), b.stats.data(), site, bf16,
                                    b.dout.data(), b.dq.data(), b.dk.data(), b.dv.data(), scratch.data(),
                                    scratch.size(), stream);
  };
  forward();
  if (backward) {
    time_calls(state, stream, run_backward);
  } else {
    time_calls(state, stream, forward);
  }
  owned.synchronize();
  uint64_t hash = 14695981039346656037ull;
  for (const cuda::DeviceBuffer<float>* out : backward ? std::vector{&b.dq, &b.dk, &b.dv} : std::vector{&b.out, &b.stats})
    hash = fnv1a(hash, *out);
  char label[32];
  std::snprintf(label, sizeof label, "bits %016llx", static_cast<unsigned long long>(hash));
  state.SetLabel(label);
}

// A fixed count: the manual time is per call, so a time-based count would run 50 times too long.
BENCHMARK_CAPTURE(attention, forward, false)->ArgName("bf16")->Arg(0)->Arg(1)->Iterations(100)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(attention, backward, true)->ArgName("bf16")->Arg(0)->Arg(1)->Iterations(100)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
