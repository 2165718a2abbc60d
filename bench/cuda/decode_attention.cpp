// Decode attention over the KV cache (ops/kv_cache.h) at Llama-3-8B's shape: 32 query heads, 8 KV heads
// of 128, every sequence 2048 tokens long (the cache's capacity), batch 1 and 64, bf16 and E4M3 caches.
// The figure of merit is bandwidth: GB/s of K and V read per call (batch x 2048 x 8 x 128 x 2 tensors
// x element size; q, out and the partial results are not counted) and its fraction of the device's
// cudaMemcpy device-to-device bandwidth (read + write counted). Time per call from CUDA events around a
// CUDA graph of 50 calls, which take turns over as many layers' caches as make 512 MB (so that the
// 50 MB L2 cannot hold them: a batch-1 layer is 8 MB in bf16), as a model's decode step reads them.
// Run: build/bench/bench_cuda_decode_attention [--benchmark_repetitions=5 --benchmark_report_aggregates_only=true]
#include "ops/kv_cache.h"

#include <benchmark/benchmark.h>

#include <algorithm>
#include <random>
#include <vector>

#include "numerics/cast.h"
#include "ops/cuda/context.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/device_info.h"
#include "runtime/cuda/graph.h"
#include "runtime/cuda/stream.h"

namespace {

using namespace fp8kit;

constexpr int64_t kHeads = 32, kKvHeads = 8, kHeadDim = 128, kLength = 2048;
constexpr int kCalls = 50;

// cudaMemcpy device to device of 1 GiB: bytes read + written per second (median of 5).
double copy_bandwidth() {
  static const double bandwidth = [] {
    const size_t bytes = size_t{1} << 30;
    cuda::DeviceBuffer<std::byte> a(bytes), b(bytes);
    const cuda::Stream stream;
    const cuda::Event start(true), stop(true);
    std::vector<double> rates;
    for (int i = 0; i < 6; ++i) {
      FP8KIT_CUDA_CHECK(cudaEventRecord(start.get(), stream.get()));
      FP8KIT_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, stream.get()));
      FP8KIT_CUDA_CHECK(cudaEventRecord(stop.get(), stream.get()));
      FP8KIT_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
      if (i > 0) rates.push_back(2.0 * bytes / (cuda::elapsed_ms(start, stop) * 1e-3));
    }
    std::sort(rates.begin(), rates.end());
    return rates[rates.size() / 2];
  }();
  return bandwidth;
}

// A cache of `batch` slots of kLength tokens on the GPU: one slot of random values (bf16 in [-2, 2],
// or finite E4M3 codes with scale 1/64) copied into every slot.
ops::KvCacheLayer make_cache(ops::Context& c, int64_t batch, DType dtype) {
  const auto scales = [&] {
    Tensor s({kKvHeads}, DType::F32);
    std::fill_n(s.data<float>(), kKvHeads, 1.0f / 64.0f);
    return s.to(Device::Cuda);
  };
  ops::KvCacheLayer cache = dtype == DType::E4M3
                                ? ops::make_kv_cache_layer(c, batch, kLength, kKvHeads, kHeadDim, dtype, scales(), scales())
                                : ops::make_kv_cache_layer(c, batch, kLength, kKvHeads, kHeadDim, dtype);
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> uniform(-2.0f, 2.0f);
  const int64_t slot = kLength * kKvHeads * kHeadDim;
  for (Tensor* t : {&cache.k, &cache.v}) {
    Tensor host({1, kLength, kKvHeads * kHeadDim}, dtype);
    for (int64_t i = 0; i < slot; ++i) {
      if (dtype == DType::E4M3) {
        const auto code = static_cast<uint8_t>(rng());
        host.data<uint8_t>()[i] = (code & 0x7F) == 0x7F ? code ^ 1 : code;
      } else {
        host.data<uint16_t>()[i] = float_to_bf16(uniform(rng));
      }
    }
    for (int64_t b = 0; b < batch; ++b) t->view(b * slot, host.shape()).copy_from(host);
  }
  return cache;
}

void decode(benchmark::State& state, DType dtype) {
  if (cuda::list_devices().empty()) {
    state.SkipWithError("no CUDA GPU");
    return;
  }
  const int64_t batch = state.range(0);
  ops::Context c(Device::Cuda);
  const double layer_bytes = 2.0 * batch * kLength * kKvHeads * kHeadDim * dtype_size(dtype);
  const int layers = static_cast<int>(std::clamp(512e6 / layer_bytes, 1.0, 64.0));
  std::vector<ops::KvCacheLayer> caches;
  for (int l = 0; l < layers; ++l) caches.push_back(make_cache(c, batch, dtype));
  std::vector<int32_t> ids(batch), lengths(batch, static_cast<int32_t>(kLength));
  for (int64_t b = 0; b < batch; ++b) ids[b] = static_cast<int32_t>(b);
  Tensor slots({batch}, DType::I32), length({batch}, DType::I32);
  slots.copy_from_host(ids.data());
  length.copy_from_host(lengths.data());
  slots = slots.to(Device::Cuda);
  length = length.to(Device::Cuda);
  Tensor q({batch, kHeads * kHeadDim}, DType::Bf16);
  for (uint16_t& x : q.span<uint16_t>()) x = float_to_bf16(0.5f);
  q = q.to(Device::Cuda);
  Tensor out;
  int call = 0;
  const auto run = [&] { ops::decode_attention(c, q, caches[call++ % layers], slots, length, kHeads, 0.0f, out); };
  for (int i = 0; i < 3; ++i) run();  // sizes the scratch, loads the module
  const cudaStream_t stream = ops::stream(c);
  const cuda::Graph graph = cuda::Graph::capture(stream, [&] {
    for (int i = 0; i < kCalls; ++i) run();
  });
  graph.launch(stream);
  const cuda::Event start(true), stop(true);
  double seconds = 0;
  for (auto _ : state) {
    FP8KIT_CUDA_CHECK(cudaEventRecord(start.get(), stream));
    graph.launch(stream);
    FP8KIT_CUDA_CHECK(cudaEventRecord(stop.get(), stream));
    const double per_call = cuda::elapsed_ms(start, stop) * 1e-3 / kCalls;
    seconds += per_call;
    state.SetIterationTime(per_call);
  }
  const double rate = layer_bytes * state.iterations() / seconds;
  state.counters["GB/s"] = rate * 1e-9;
  state.counters["of_copy"] = rate / copy_bandwidth();
  state.counters["layers"] = layers;
}

// A fixed count: the manual time is per call, so a time-based count would run 50 times too long.
BENCHMARK_CAPTURE(decode, bf16, DType::Bf16)->ArgName("batch")->Arg(1)->Arg(64)->Iterations(20)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(decode, e4m3, DType::E4M3)->ArgName("batch")->Arg(1)->Arg(64)->Iterations(20)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
