// WordPiece on the seed's data: counting words and learning the 20,000-token vocabulary on the
// 20,000 training reviews (target <= 60 s on 2 cores), and tokenizing all 50,000 reviews to
// [n, 200] ids (target <= 10 s). Needs the IMDB data (see imdb_data.h).
#include "imdb_data.h"
#include "text/wordpiece_learner.h"
#include "text/wordpiece_tokenizer.h"

#include <benchmark/benchmark.h>

namespace fp8kit {
namespace {

const std::vector<std::string>* seed_vocab() {
  static const auto vocab = [] {
    return bench::imdb() ? text::learn_wordpiece_vocab(std::span<const std::string>(bench::imdb()->train.texts))
                         : std::vector<std::string>{};
  }();
  return bench::imdb() ? &vocab : nullptr;
}

void BM_CountWords(benchmark::State& state) {
  if (!bench::imdb()) return state.SkipWithError("IMDB data not found");
  for (auto _ : state) benchmark::DoNotOptimize(text::count_words(bench::imdb()->train.texts));
}

void BM_LearnVocab20k(benchmark::State& state) {
  if (!bench::imdb()) return state.SkipWithError("IMDB data not found");
  for (auto _ : state) {
    const auto vocab = text::learn_wordpiece_vocab(std::span<const std::string>(bench::imdb()->train.texts));
    state.counters["vocab_size"] = static_cast<double>(vocab.size());
  }
}

void BM_EncodeAll50k(benchmark::State& state) {
  if (!bench::imdb()) return state.SkipWithError("IMDB data not found");
  const text::WordPieceTokenizer tokenizer(*seed_vocab());
  const auto& s = *bench::imdb();
  for (auto _ : state) {
    for (const auto* split : {&s.train, &s.validation, &s.test}) {
      benchmark::DoNotOptimize(tokenizer.encode_batch(split->texts, 200));  // [n, 200]
    }
  }
  state.counters["reviews"] = static_cast<double>(s.train.texts.size() + s.validation.texts.size() + s.test.texts.size());
}

BENCHMARK(BM_CountWords)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_LearnVocab20k)->Unit(benchmark::kMillisecond)->Iterations(3);
BENCHMARK(BM_EncodeAll50k)->Unit(benchmark::kMillisecond)->Iterations(3);

}  // namespace
}  // namespace fp8kit

BENCHMARK_MAIN();
