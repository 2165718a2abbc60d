// Time of one training step of the seed classifier (forward + backward + Adam), batch 32 x 200
// random tokens, per precision and OpenMP thread count (the /1 and /2 suffixes).
// Run: build/bench/bench_train_step [--benchmark_filter=Fp8] [--benchmark_min_time=2]
// On a machine shared with other busy processes, libgomp's default spin-waiting makes the 2-thread
// runs collapse (two spinning threads starve each other): run with OMP_WAIT_POLICY=passive there.
#include "models/seed_classifier.h"
#include "optim/adam.h"

#include <benchmark/benchmark.h>
#include <omp.h>

#include <random>
#include <vector>

namespace {

using fp8kit::models::SeedClassifier;
using fp8kit::nn::Precision;

void train_step(benchmark::State& state, Precision precision) {
  constexpr int kBatch = 32;
  const int threads_before = omp_get_max_threads();
  omp_set_num_threads(static_cast<int>(state.range(0)));
  SeedClassifier model({}, 1234);
  model.set_precision(precision);
  fp8kit::optim::Adam adam(model.parameter_set());
  const int seq = model.config().sequence_length;
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> token(0, model.config().vocabulary_size - 1);
  std::vector<int32_t> tokens(kBatch * seq);
  for (int32_t& t : tokens) t = token(rng);
  std::vector<float> labels(kBatch);
  for (int i = 0; i < kBatch; ++i) labels[i] = static_cast<float>(i % 2);
  uint64_t step = 0;
  for (auto _ : state) {
    model.forward(tokens, kBatch, true, step++);
    benchmark::DoNotOptimize(model.backward(labels));
    adam.step(model.context());
  }
  omp_set_num_threads(threads_before);
}

BENCHMARK_CAPTURE(train_step, Fp32, Precision::Fp32)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(train_step, Bf16, Precision::Bf16)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK_CAPTURE(train_step, Fp8, Precision::Fp8)->Arg(1)->Arg(2)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace

BENCHMARK_MAIN();
