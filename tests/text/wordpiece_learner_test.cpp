// WordPiece learner: hand-worked vocabularies, and agreement with the literal transcription of
// TF Text's Python learner on random corpora.
#include "text/wordpiece_learner.h"

#include "base/error.h"
#include "wordpiece_learner_reference.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

namespace fp8kit::text {
namespace {

using ::testing::ElementsAre;

TEST(WordPieceLearner, KerasHubDocstringExample) {
  // KerasHub's compute_word_piece_vocabulary docstring: "bat sat pat mat rat", size 13.
  WordPieceLearnerOptions options;
  options.vocab_size = 13;
  options.reserved_tokens = {"[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"};
  const std::vector<std::string> texts = {"bat sat pat mat rat"};
  EXPECT_EQ(learn_wordpiece_vocab(std::span<const std::string>(texts), options),
            (std::vector<std::string>{"[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]", "a", "b", "m", "p", "r", "s",
                                      "t", "##at"}));
}

TEST(WordPieceLearner, HandWorkedThresholdSearch) {
  // Counts the 12, tea 3, tee 2, a 1; size 12, slack 0.6; search bounds [max(1, 1), min(12, 1e7)].
  // T = 6. Iteration 0 (every start) keeps the 12, ##he 12, ##e 14 (the, tee). Iteration 1
  // segments tea = t ##e ##a and tee = t ##e ##e, so only "the" stays >= 6; iterations 2, 3 agree.
  // Vocab: 2 reserved + a e h t + the + ##a ##e ##h ##t (count 1) = 11 < 12 - 0.6: search lower.
  // T = (1 + 5) // 2 = 3. Iteration 0 also keeps tea 3, ##ea 3, ##a 3; iteration 1 segments tea
  // as one piece and tee = t ##e ##e, leaving the 12, tea 3. Vocab size 12: accepted.
  const WordCounts counts = {{"the", 12}, {"tea", 3}, {"tee", 2}, {"a", 1}};
  WordPieceLearnerOptions options;
  options.vocab_size = 12;
  options.lower_thresh = 1;
  const auto vocab = learn_wordpiece_vocab(counts, options);
  EXPECT_THAT(vocab, ElementsAre("[PAD]", "[UNK]", "a", "e", "h", "t", "the", "tea", "##a", "##e", "##h", "##t"));
  EXPECT_EQ(vocab, reference::learn(counts, options));
}

TEST(WordPieceLearner, AlphabetIsSortedByCodePointAndRareCharactersAreDropped) {
  const WordCounts counts = {{"é", 5}, {"b", 4}, {"a", 3}, {"z", 1}, {"ab", 2}};
  WordPieceLearnerOptions options;
  options.vocab_size = 100;
  options.max_unique_chars = 3;  // keeps é (5), a (3 + 2), b (4 + 2); z is dropped with its word
  options.lower_thresh = 1;
  const auto vocab = learn_wordpiece_vocab(counts, options);
  EXPECT_EQ(vocab, reference::learn(counts, options));
  EXPECT_THAT(std::vector<std::string>(vocab.begin() + 2, vocab.begin() + 5), ElementsAre("a", "b", "é"));
  EXPECT_EQ(std::count(vocab.begin(), vocab.end(), "z"), 0);
}

TEST(WordPieceLearner, DropsReservedAndOverlongWords) {
  const WordCounts counts = {{"[UNK]", 50}, {std::string(51, 'x'), 50}, {"ok", 20}};
  WordPieceLearnerOptions options;
  options.vocab_size = 10;
  const auto vocab = learn_wordpiece_vocab(counts, options);
  EXPECT_EQ(vocab, reference::learn(counts, options));
  EXPECT_EQ(std::count(vocab.begin(), vocab.end(), "x"), 0);  // the 51-character word is gone
  EXPECT_EQ(std::count(vocab.begin(), vocab.end(), "[UNK]"), 1);
}

TEST(WordPieceLearner, CountWordsKeepsFirstOccurrenceOrder) {
  const std::vector<std::string> texts = {"b a, b", "c a"};
  EXPECT_EQ(count_words(std::span<const std::string>(texts)),
            (WordCounts{{"b", 2}, {"a", 2}, {",", 1}, {"c", 1}}));
}

TEST(WordPieceLearner, RejectsBadOptionsAndEmptyInput) {
  WordPieceLearnerOptions options;
  EXPECT_THROW(learn_wordpiece_vocab(WordCounts{}, options), Error);
  options.vocab_size = 2;  // no room after [PAD], [UNK]
  EXPECT_THROW(learn_wordpiece_vocab(WordCounts{{"a", 1}}, options), Error);
}

// Random corpora: Zipf-like counts over words from a small alphabet (with a non-ASCII letter),
// so that substrings are shared and the threshold search runs several steps.
WordCounts random_counts(std::mt19937& rng, int num_words, int alphabet) {
  const std::vector<std::string> letters = {"a", "b", "c", "d", "e", "ñ", "f", "g"};
  std::uniform_int_distribution<int> length(1, 9), letter(0, alphabet - 1);
  WordCounts counts;
  for (int i = 0; i < num_words; ++i) {
    std::string word;
    for (int n = length(rng); n > 0; --n) word += letters[letter(rng)];
    if (std::any_of(counts.begin(), counts.end(), [&](const auto& wc) { return wc.first == word; })) continue;
    counts.emplace_back(word, 1 + 400 / (i + 1) + static_cast<int>(rng() % 3));
  }
  return counts;
}

TEST(WordPieceLearner, MatchesTheLiteralTranscriptionOfTfText) {
  std::mt19937 rng(1234);
  int with_learned_pieces = 0;  // trials whose vocabulary has multi-character pieces
  for (int trial = 0; trial < 40; ++trial) {
    const WordCounts counts = random_counts(rng, 30 + trial * 5, 3 + trial % 6);
    WordPieceLearnerOptions options;
    options.vocab_size = 20 + (trial * 7) % 60;
    options.lower_thresh = 1 + trial % 3;
    options.max_token_length = 4 + trial % 7;  // some words are too long
    options.num_iterations = 1 + trial % 4;
    options.max_unique_chars = 3 + trial % 5;
    options.slack_ratio = trial % 2 ? 0.05 : 0.3;
    SCOPED_TRACE(trial);
    const auto vocab = learn_wordpiece_vocab(counts, options);
    EXPECT_EQ(vocab, reference::learn(counts, options));
    with_learned_pieces += std::any_of(vocab.begin() + 2, vocab.end(), [](const std::string& t) {
      return t.size() > (t.starts_with("##") ? 3u : 2u);
    });
  }
  EXPECT_GE(with_learned_pieces, 30);
}

}  // namespace
}  // namespace fp8kit::text
