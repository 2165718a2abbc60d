// Loading aclImdb's train and test folders (50,000 reviews) from the 28 MB tar.gz in one pass
// (libarchive, no extraction), with the seed-42 validation split and lowercasing.
#include "imdb_data.h"

#include <benchmark/benchmark.h>

namespace fp8kit {
namespace {

void BM_LoadImdbTarball(benchmark::State& state) {
  const auto path = bench::imdb_path();
  if (!path) return state.SkipWithError("IMDB data not found");
  for (auto _ : state) {
    const auto splits = data::load_imdb(*path);
    state.counters["reviews"] =
        static_cast<double>(splits.train.texts.size() + splits.validation.texts.size() + splits.test.texts.size());
  }
}

BENCHMARK(BM_LoadImdbTarball)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace fp8kit

BENCHMARK_MAIN();
