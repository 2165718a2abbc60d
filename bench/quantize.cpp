// Quantize + amax throughput (convert.h) against memcpy of the same float buffer, per SIMD path,
// single- and multi-threaded, at L1-, L2- and DRAM-sized arrays. bytes_per_second counts the float32
// input (4 bytes per element) for every benchmark, so the figures compare directly.
#include "numerics/convert.h"

#include <benchmark/benchmark.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <string>
#include <random>
#include <vector>

namespace {

using fp8kit::SimdPath;

const int64_t kSizes[] = {int64_t{1} << 12, int64_t{1} << 17, int64_t{1} << 24};  // 16 KiB, 512 KiB, 64 MiB of floats

std::vector<float> input(int64_t n) {
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = normal(rng);
  return x;
}

// Runs the body with `threads` OpenMP threads, restoring the default afterwards.
struct ThreadScope {
  int saved = omp_get_max_threads();
  explicit ThreadScope(int threads) { omp_set_num_threads(threads); }
  ~ThreadScope() { omp_set_num_threads(saved); }
};

int threads_arg(int64_t arg) { return arg == 0 ? omp_get_num_procs() : static_cast<int>(arg); }

void BM_Memcpy(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int threads = threads_arg(state.range(1));
  const std::vector<float> x = input(n);
  std::vector<float> y(x.size());
  for (auto _ : state) {
    // Split like the conversions do, so the threaded figure is the machine's copy bandwidth.
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int t = 0; t < threads; ++t) {
      const size_t begin = x.size() * t / threads, end = x.size() * (t + 1) / threads;
      std::memcpy(y.data() + begin, x.data() + begin, (end - begin) * sizeof(float));
    }
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * n * static_cast<int64_t>(sizeof(float)));
}

void BM_Quantize(benchmark::State& state) {
  const int64_t n = state.range(0);
  const auto path = static_cast<SimdPath>(state.range(1));
  const auto paths = fp8kit::supported_simd_paths();
  if (std::find(paths.begin(), paths.end(), path) == paths.end()) {
    state.SkipWithError("this CPU cannot run the path");
    return;
  }
  fp8kit::set_simd_path(path);
  ThreadScope scope(threads_arg(state.range(2)));
  const std::vector<float> x = input(n);
  std::vector<uint8_t> q(x.size());
  for (auto _ : state) {
    benchmark::DoNotOptimize(fp8kit::quantize_fp8(x, 37.0f, fp8kit::Fp8Format::E4M3, q));
    benchmark::ClobberMemory();
  }
  fp8kit::set_simd_path(SimdPath::Auto);
  state.SetLabel(std::string(fp8kit::name(path)));
  state.SetBytesProcessed(state.iterations() * n * static_cast<int64_t>(sizeof(float)));
}

void memcpy_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"n", "threads"});
  for (int64_t n : kSizes) b->Args({n, 1})->Args({n, 0});  // threads 0 = all cores
}

void quantize_args(benchmark::internal::Benchmark* b) {
  b->ArgNames({"n", "path", "threads"});
  for (int64_t n : kSizes) {
    for (SimdPath p : {SimdPath::Portable, SimdPath::Avx2, SimdPath::Avx512}) b->Args({n, static_cast<int64_t>(p), 1});
    b->Args({n, static_cast<int64_t>(fp8kit::supported_simd_paths().back()), 0});
  }
}

BENCHMARK(BM_Memcpy)->Apply(memcpy_args)->UseRealTime();
BENCHMARK(BM_Quantize)->Apply(quantize_args)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
