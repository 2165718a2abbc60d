// Grouped-query SDPA (ops/sdpa.h: cuDNN's fused flash attention) at a Llama-sized shape: batch 4, seq
// 4096, 32 query heads of 128, causal, bf16; as multi-head (32 kv heads) and GQA (8 kv heads). And the
// FP8 forward (SdpaShape::fp8: its amax and quantization passes over q, k, v and out's dequantization
// included).
// Time per call from CUDA events around a CUDA graph of 50 back-to-back calls (graph_timing.h; this
// also shows that the op replays inside a captured graph). TFLOP/s counts the causal half of the
// score matrix: forward 2 GEMMs of 2*b*h*s*s*d / 2 flops, backward 2.5 times that (5 GEMMs).
// Run: build/bench/bench_cuda_sdpa [--benchmark_repetitions=3 --benchmark_report_aggregates_only=true]
#include "ops/sdpa.h"

#include <benchmark/benchmark.h>

#include <random>
#include <vector>

#include "graph_timing.h"
#include "numerics/cast.h"
#include "ops/cuda/context.h"
#include "runtime/cuda/device_info.h"

namespace {

using namespace fp8kit;

// A bf16 tensor of normal(0, 1) values on the GPU.
Tensor normal_bf16(const std::vector<int64_t>& shape, uint32_t seed) {
  Tensor host(shape, DType::Bf16);
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (uint16_t& x : host.span<uint16_t>()) x = float_to_bf16(normal(rng));
  return host.to(Device::Cuda);
}

void sdpa(benchmark::State& state, bool backward, bool fp8) {
  if (cuda::list_devices().empty()) {
    state.SkipWithError("no CUDA GPU");
    return;
  }
  const ops::SdpaShape s{.batch = 4, .seq = 4096, .heads = 32, .kv_heads = state.range(0), .head_dim = 128,
                            .fp8 = fp8};
  ops::Context c(Device::Cuda);
  const std::vector<int64_t> q_shape = {s.batch, s.seq, s.heads * s.head_dim},
                             kv_shape = {s.batch, s.seq, s.kv_heads * s.head_dim};
  const Tensor q = normal_bf16(q_shape, 1), k = normal_bf16(kv_shape, 2), v = normal_bf16(kv_shape, 3),
               dout = normal_bf16(q_shape, 4);
  Tensor out, lse, dq, dk, dv;
  ops::sdpa_forward(c, s, q, k, v, true, out, lse);
  if (backward) {
    bench::time_calls(state, ops::stream(c), [&] { ops::sdpa_backward(c, s, q, k, v, out, lse, dout, dq, dk, dv); });
  } else {
    bench::time_calls(state, ops::stream(c), [&] { ops::sdpa_forward(c, s, q, k, v, true, out, lse); });
  }
  c.synchronize();
  const double forward_flops = 2.0 * 2.0 * s.batch * s.heads * s.seq * s.seq * s.head_dim / 2.0;
  state.counters["TFLOP/s"] = benchmark::Counter((backward ? 2.5 : 1.0) * forward_flops * 1e-12,
                                                 benchmark::Counter::kIsIterationInvariantRate);
}

// A fixed count: the manual time is per call, so a time-based count would run 50 times too long.
BENCHMARK_CAPTURE(sdpa, forward, false, false)->ArgName("kv_heads")->Arg(32)->Arg(8)->Iterations(10)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(sdpa, forward_fp8, false, true)->ArgName("kv_heads")->Arg(32)->Arg(8)->Iterations(10)->UseManualTime()->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(sdpa, backward, true, false)->ArgName("kv_heads")->Arg(32)->Arg(8)->Iterations(10)->UseManualTime()->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
