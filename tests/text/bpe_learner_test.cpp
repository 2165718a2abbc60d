// BPE learning: a hand-computed merge order, the tie-break, special tokens' ids, independence from
// thread count and text order, and a check against a learner that recounts every pair each step.
#include "text/bpe_learner.h"

#include "common/error_of.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <omp.h>

#include <algorithm>
#include <map>
#include <random>

namespace fp8kit::text {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::error_of;

// The learned merges as "left right" byte strings.
std::vector<std::string> merge_strings(const BpeTokenizer& tokenizer) {
  std::vector<std::string> out;
  for (const auto& [a, b] : tokenizer.model().merges) out.push_back(tokenizer.token_bytes(a) + "|" + tokenizer.token_bytes(b));
  return out;
}

TEST(BpeLearner, HandComputedExample) {
  // Pieces: "ab" x1, " ab" x2, " abc" x1. Pair counts: (a,b) 4, (" ",a) 3, (b,c) 1.
  // 1. (a,b): 4 -> "ab"; then (" ",ab) 3, (ab,c) 1.  2. (" ",ab) -> " ab"; then (" ab",c) 1.
  // 3. (" ab",c), count 1: below the default min_pair_count 2, so learned only with 1.
  const std::vector<std::string> texts = {"ab ab ab abc"};
  const BpeTokenizer two = learn_bpe(texts, {.vocab_size = 300});
  EXPECT_THAT(merge_strings(two), ElementsAre("a|b", " |ab"));
  EXPECT_EQ(two.vocab_size(), 1 + 256 + 2);
  const BpeTokenizer three = learn_bpe(texts, {.vocab_size = 300, .min_pair_count = 1});
  EXPECT_THAT(merge_strings(three), ElementsAre("a|b", " |ab", " ab|c"));
  // The vocabulary: specials, the 256 bytes, then merged tokens in merge order.
  EXPECT_EQ(three.token_bytes(0), "<|endoftext|>");
  EXPECT_EQ(three.eos_id(), 0);
  EXPECT_EQ(three.token_bytes(1), std::string(1, '\0'));
  EXPECT_EQ(three.token_bytes(257), "ab");
  EXPECT_EQ(three.token_bytes(258), " ab");
  EXPECT_EQ(three.token_bytes(259), " abc");
  EXPECT_EQ(three.encode(" abc ab"), (std::vector<int32_t>{259, 258}));
  // vocab_size bounds the merges.
  EXPECT_THAT(merge_strings(learn_bpe(texts, {.vocab_size = 258})), ElementsAre("a|b"));
}

TEST(BpeLearner, TiesGoToTheSmallestBytes) {
  // Pieces "xy", " yx": (x,y), (" ",y), (y,x) all once. " " < "x" < "y" as bytes, so (" ",y) first;
  // then (" y",x) and (x,y) tie, and " y" < "x".
  const BpeTokenizer tokenizer = learn_bpe(std::vector<std::string>{"xy yx"}, {.vocab_size = 400, .min_pair_count = 1});
  EXPECT_THAT(merge_strings(tokenizer), ElementsAre(" |y", " y|x", "x|y"));
}

TEST(BpeLearner, SpecialTokensComeFirst) {
  const BpeTokenizer tokenizer =
      learn_bpe(std::vector<std::string>{"aa aa"}, {.vocab_size = 300, .special_tokens = {"<s>", "</s>", "<pad>"}});
  EXPECT_EQ(tokenizer.token_id("<s>"), 0);
  EXPECT_EQ(tokenizer.token_id("<pad>"), 2);
  EXPECT_EQ(tokenizer.token_id(std::string(1, 'a')), 3 + 'a');
  EXPECT_EQ(tokenizer.model().added_tokens.size(), 3u);
  EXPECT_EQ(tokenizer.eos_id(), std::nullopt);
}

// A learner with no incremental updates: recount every pair of every word at each step.
std::vector<std::string> reference_merges(const std::vector<std::string>& texts, int num_merges) {
  std::map<std::string, int64_t> piece_counts;
  for (const std::string& text : texts) {
    for (std::string_view piece : split_pieces(text, SplitPattern::kGpt2)) ++piece_counts[std::string(piece)];
  }
  std::vector<std::pair<std::vector<std::string>, int64_t>> words;
  for (const auto& [piece, count] : piece_counts) {
    std::vector<std::string> symbols;
    for (char ch : piece) symbols.emplace_back(1, ch);
    words.emplace_back(symbols, count);
  }
  std::vector<std::string> merges;
  for (int m = 0; m < num_merges; ++m) {
    std::map<std::pair<std::string, std::string>, int64_t> counts;  // ordered by bytes: ties go to the first
    for (const auto& [symbols, count] : words) {
      for (size_t i = 0; i + 1 < symbols.size(); ++i) counts[{symbols[i], symbols[i + 1]}] += count;
    }
    const auto best = std::max_element(counts.begin(), counts.end(), [](const auto& a, const auto& b) { return a.second < b.second; });
    if (best == counts.end() || best->second < 2) break;
    const auto [left, right] = best->first;
    merges.push_back(left + "|" + right);
    for (auto& [symbols, count] : words) {
      std::vector<std::string> next;
      for (size_t i = 0; i < symbols.size(); ++i) {
        if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
          next.push_back(left + right), ++i;
        } else {
          next.push_back(symbols[i]);
        }
      }
      symbols = std::move(next);
    }
  }
  return merges;
}

std::vector<std::string> random_texts(uint32_t seed, int n) {
  std::mt19937 rng(seed);
  const std::vector<std::string> words = {"the", "then", "there", "other", "mother", "aaaa", "abab", "banana",
                                          "1999", "caf\xc3\xa9", "\xe6\x97\xa5\xe6\x9c\xac", "it's", "!!", "\n"};
  std::vector<std::string> texts;
  for (int t = 0; t < n; ++t) {
    std::string text;
    for (int i = 0; i < 30; ++i) text += (rng() % 3 ? " " : "") + words[rng() % words.size()];
    texts.push_back(text);
  }
  return texts;
}

TEST(BpeLearner, AgreesWithRecountingEveryPair) {
  const std::vector<std::string> texts = random_texts(5, 300);
  const BpeTokenizer tokenizer = learn_bpe(texts, {.vocab_size = 257 + 60});
  EXPECT_EQ(merge_strings(tokenizer), reference_merges(texts, 60));
}

TEST(BpeLearner, DeterministicAcrossThreadsAndTextOrder) {
  std::vector<std::string> texts = random_texts(9, 400);
  const BpeTokenizer first = learn_bpe(texts, {.vocab_size = 400, .pattern = SplitPattern::kLlama3});
  std::reverse(texts.begin(), texts.end());
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const BpeTokenizer second = learn_bpe(texts, {.vocab_size = 400, .pattern = SplitPattern::kLlama3});
  omp_set_num_threads(threads);
  EXPECT_EQ(first.model().tokens, second.model().tokens);
  EXPECT_EQ(first.model().merges, second.model().merges);
}

TEST(BpeLearner, RefusesBadOptions) {
  const std::vector<std::string> texts = {"a"};
  EXPECT_THAT(error_of([&] { learn_bpe(texts, {.vocab_size = 256}); }),
              HasSubstr("the BPE vocabulary size 256 must be at least the 1 special tokens + 256 bytes"));
  EXPECT_EQ(error_of([&] { learn_bpe(texts, {.special_tokens = {"<a>", "<a>"}}); }),
            "the special token \"<a>\" is listed twice");
  EXPECT_EQ(error_of([&] { learn_bpe(texts, {.special_tokens = {""}}); }), "a special token is empty");
}

}  // namespace
}  // namespace fp8kit::text
