// Byte-level BPE on IMDB: learning an 8,192-token tokenizer on the 20,000 training reviews of the
// seed split (with their original case), and encoding the 25,000 test reviews on one thread.
// Needs the IMDB data (see imdb_data.h).
#include "imdb_data.h"
#include "text/bpe_learner.h"
#include "text/bpe_tokenizer.h"

#include <benchmark/benchmark.h>
#include <omp.h>

namespace fp8kit {
namespace {

// The splits with case kept, as an LM tokenizer reads them.
const data::ImdbSplits* cased_imdb() {
  static const std::optional<data::ImdbSplits> splits = []() -> std::optional<data::ImdbSplits> {
    const auto path = bench::imdb_path();
    if (!path) return std::nullopt;
    return data::load_imdb(*path, {.lowercase = false});
  }();
  return splits ? &*splits : nullptr;
}

void BM_LearnBpe8k(benchmark::State& state) {
  if (!cased_imdb()) return state.SkipWithError("IMDB data not found");
  const auto pattern = static_cast<text::SplitPattern>(state.range(0));
  for (auto _ : state) {
    const auto tokenizer = text::learn_bpe(cased_imdb()->train.texts, {.vocab_size = 8192, .pattern = pattern});
    state.counters["vocab_size"] = tokenizer.vocab_size();
  }
}

void BM_EncodeTest25kOneThread(benchmark::State& state) {
  if (!cased_imdb()) return state.SkipWithError("IMDB data not found");
  const auto pattern = static_cast<text::SplitPattern>(state.range(0));
  static std::optional<text::BpeTokenizer> tokenizers[2];
  auto& tokenizer = tokenizers[state.range(0)];
  if (!tokenizer) tokenizer = text::learn_bpe(cased_imdb()->train.texts, {.vocab_size = 8192, .pattern = pattern});
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  int64_t tokens = 0, bytes = 0;
  for (auto _ : state) {
    tokens = 0, bytes = 0;
    for (const auto& ids : tokenizer->encode_batch(cased_imdb()->test.texts)) tokens += static_cast<int64_t>(ids.size());
  }
  for (const auto& text : cased_imdb()->test.texts) bytes += static_cast<int64_t>(text.size());
  omp_set_num_threads(threads);
  state.counters["tokens"] = static_cast<double>(tokens);
  state.counters["bytes_per_token"] = static_cast<double>(bytes) / static_cast<double>(tokens);
}

BENCHMARK(BM_LearnBpe8k)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(1);
BENCHMARK(BM_EncodeTest25kOneThread)->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace fp8kit

BENCHMARK_MAIN();
