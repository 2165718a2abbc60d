// BPE learning with incremental pair counts: an index pair -> words holding it, and a lazy max-heap
// of (count, pair) entries, where an entry whose count is no longer the pair's is skipped when popped.
#include "text/bpe_learner.h"

#include "base/error.h"

#include <omp.h>

#include <algorithm>
#include <queue>
#include <unordered_map>
#include <unordered_set>

namespace fp8kit::text {

namespace {

struct ViewHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>{}(s); }
};

// Distinct pieces of all texts with their counts, sorted by bytes (so the order is the same on any
// thread count).
std::vector<std::pair<std::string_view, int64_t>> count_pieces(std::span<const std::string> texts, SplitPattern pattern) {
  using Map = std::unordered_map<std::string_view, int64_t, ViewHash, std::equal_to<>>;
  const int num_threads = omp_get_max_threads();
  std::vector<Map> maps(num_threads);
  const auto n = static_cast<int64_t>(texts.size());
#pragma omp parallel num_threads(num_threads)
  {
    Map& map = maps[omp_get_thread_num()];
    map.reserve(1 << 18);
    std::vector<std::string_view> pieces;
#pragma omp for schedule(dynamic, 64)
    for (int64_t i = 0; i < n; ++i) {
      pieces.clear();
      split_pieces(texts[i], pattern, pieces);
      for (const std::string_view piece : pieces) ++map[piece];
    }
  }
  for (int t = 1; t < num_threads; ++t) {
    for (const auto& [piece, count] : maps[t]) maps[0][piece] += count;
  }
  std::vector<std::pair<std::string_view, int64_t>> counts(maps[0].begin(), maps[0].end());
  std::sort(counts.begin(), counts.end());
  return counts;
}

uint64_t pair_key(int32_t a, int32_t b) { return (static_cast<uint64_t>(a) << 32) | static_cast<uint32_t>(b); }
int32_t left_of(uint64_t key) { return static_cast<int32_t>(key >> 32); }
int32_t right_of(uint64_t key) { return static_cast<int32_t>(key & 0xFFFFFFFFu); }

}  // namespace

BpeTokenizer learn_bpe(std::span<const std::string> texts, const BpeLearnerOptions& options) {
  const auto num_special = static_cast<int64_t>(options.special_tokens.size());
  FP8KIT_CHECK(options.vocab_size >= num_special + 256 && options.vocab_size < INT32_MAX,
               "the BPE vocabulary size {} must be at least the {} special tokens + 256 bytes (and below 2^31)",
               options.vocab_size, num_special);
  FP8KIT_CHECK(options.min_pair_count >= 1, "min_pair_count must be at least 1, got {}", options.min_pair_count);
  BpeModel model;
  model.pattern = options.pattern;
  std::unordered_set<std::string_view> specials;
  for (const std::string& token : options.special_tokens) {
    FP8KIT_CHECK(!token.empty(), "a special token is empty");
    FP8KIT_CHECK(specials.insert(token).second, "the special token \"{}\" is listed twice", token);
    model.added_tokens.push_back({static_cast<int32_t>(model.tokens.size()), true});
    model.tokens.push_back(token);
  }
  std::unordered_map<std::string, int32_t> ordinary;  // bytes -> id of every byte and learned token
  for (int b = 0; b < 256; ++b) {
    ordinary.emplace(std::string(1, static_cast<char>(b)), static_cast<int32_t>(model.tokens.size()));
    model.tokens.emplace_back(1, static_cast<char>(b));
  }

  // Each distinct piece as a sequence of token ids, with its count.
  const auto pieces = count_pieces(texts, options.pattern);
  std::vector<std::vector<int32_t>> words(pieces.size());
  std::vector<int64_t> counts(pieces.size());
  std::unordered_map<uint64_t, int64_t> pair_counts;
  std::unordered_map<uint64_t, std::vector<int32_t>> pair_words;  // may repeat a word; may hold words that lost the pair
  for (size_t w = 0; w < pieces.size(); ++w) {
    counts[w] = pieces[w].second;
    for (const char ch : pieces[w].first) words[w].push_back(static_cast<int32_t>(num_special + static_cast<unsigned char>(ch)));
    for (size_t i = 0; i + 1 < words[w].size(); ++i) {
      const uint64_t key = pair_key(words[w][i], words[w][i + 1]);
      pair_counts[key] += counts[w];
      auto& holders = pair_words[key];
      if (holders.empty() || holders.back() != static_cast<int32_t>(w)) holders.push_back(static_cast<int32_t>(w));
    }
  }

  struct Entry {
    int64_t count;
    uint64_t pair;
  };
  // Most frequent first; on ties, the pair of smallest (left bytes, right bytes).
  const auto lower_priority = [&](const Entry& a, const Entry& b) {
    if (a.count != b.count) return a.count < b.count;
    const std::string& a_left = model.tokens[left_of(a.pair)];
    const std::string& b_left = model.tokens[left_of(b.pair)];
    if (a_left != b_left) return a_left > b_left;
    return model.tokens[right_of(a.pair)] > model.tokens[right_of(b.pair)];
  };
  std::priority_queue<Entry, std::vector<Entry>, decltype(lower_priority)> heap(lower_priority);
  for (const auto& [pair, count] : pair_counts) heap.push({count, pair});

  std::vector<int64_t> last_merge(words.size(), -1);  // the merge that last rewrote each word
  std::unordered_map<uint64_t, int64_t> deltas;
  std::vector<int32_t> merged_word;
  while (static_cast<int64_t>(model.tokens.size()) < options.vocab_size && !heap.empty()) {
    const Entry top = heap.top();
    heap.pop();
    const auto current = pair_counts.find(top.pair);
    if (current == pair_counts.end() || current->second != top.count) continue;  // stale entry
    if (top.count < options.min_pair_count) break;
    const int32_t left = left_of(top.pair), right = right_of(top.pair);
    std::string bytes = model.tokens[left] + model.tokens[right];
    const auto [it, is_new] = ordinary.try_emplace(bytes, static_cast<int32_t>(model.tokens.size()));
    const int32_t merged = it->second;
    if (is_new) model.tokens.push_back(std::move(bytes));
    const auto merge_index = static_cast<int64_t>(model.merges.size());
    model.merges.push_back({left, right});

    deltas.clear();
    for (const int32_t w : pair_words[top.pair]) {
      if (last_merge[w] == merge_index) continue;
      last_merge[w] = merge_index;
      const std::vector<int32_t>& word = words[w];
      merged_word.clear();
      for (size_t i = 0; i < word.size(); ++i) {
        if (i + 1 < word.size() && word[i] == left && word[i + 1] == right) {
          merged_word.push_back(merged), ++i;
        } else {
          merged_word.push_back(word[i]);
        }
      }
      if (merged_word.size() == word.size()) continue;  // the word lost the pair to an earlier merge
      for (size_t i = 0; i + 1 < word.size(); ++i) deltas[pair_key(word[i], word[i + 1])] -= counts[w];
      for (size_t i = 0; i + 1 < merged_word.size(); ++i) {
        const uint64_t key = pair_key(merged_word[i], merged_word[i + 1]);
        deltas[key] += counts[w];
        if (merged_word[i] == merged || merged_word[i + 1] == merged) {
          auto& holders = pair_words[key];
          if (holders.empty() || holders.back() != w) holders.push_back(w);
        }
      }
      words[w] = merged_word;
    }
    for (const auto& [key, delta] : deltas) {
      if (delta == 0) continue;
      const int64_t count = pair_counts[key] += delta;
      if (count == 0) {
        pair_counts.erase(key);
        pair_words.erase(key);
      } else {
        heap.push({count, key});
      }
    }
  }
  return BpeTokenizer(std::move(model));
}

}  // namespace fp8kit::text
