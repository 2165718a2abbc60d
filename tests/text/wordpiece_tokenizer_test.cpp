// WordPiece tokenizer: greedy longest match, [UNK] rules, padding, batches and detokenization.
#include "text/wordpiece_tokenizer.h"

#include "base/error.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

namespace fp8kit::text {
namespace {

using ::testing::ElementsAre;

// [PAD] 0, [UNK] 1, then pieces.
WordPieceTokenizer small_tokenizer() {
  return WordPieceTokenizer({"[PAD]", "[UNK]", "the", "qu", "##ick", "br", "##own", "fox", ".", "un", "##aff",
                             "##able", "a", "##a", "é", "##é", "##ab"});
}

TEST(WordPieceTokenizer, KerasHubDocstringExample) {
  const auto tokenizer = small_tokenizer();
  EXPECT_THAT(tokenizer.encode("the quick brown fox."), ElementsAre(2, 3, 4, 5, 6, 7, 8));
  EXPECT_EQ(tokenizer.detokenize(tokenizer.encode("the quick brown fox.")), "the quick brown fox .");
}

TEST(WordPieceTokenizer, GreedyLongestMatchFirst) {
  const auto tokenizer = small_tokenizer();
  EXPECT_THAT(tokenizer.encode("unaffable"), ElementsAre(9, 10, 11));
  // After "a", the longest continuation "##ab" is taken, not "##a".
  EXPECT_THAT(tokenizer.encode("aab"), ElementsAre(12, 16));
  EXPECT_THAT(tokenizer.encode("aaa"), ElementsAre(12, 13, 13));
}

TEST(WordPieceTokenizer, UnsplittableWordsBecomeOneUnknown) {
  const auto tokenizer = small_tokenizer();
  // "thex": "the" matches but "##x" does not, so the whole word is [UNK]; neighbours are unaffected.
  EXPECT_THAT(tokenizer.encode("the thex fox"), ElementsAre(2, 1, 7));
  EXPECT_THAT(tokenizer.encode("THE"), ElementsAre(1));  // no lowercasing inside the tokenizer
}

TEST(WordPieceTokenizer, MultiByteCharactersAreNeverSplit) {
  const auto tokenizer = small_tokenizer();
  EXPECT_THAT(tokenizer.encode("éé"), ElementsAre(14, 15));
  EXPECT_EQ(tokenizer.detokenize(tokenizer.encode("éé a")), "éé a");
}

TEST(WordPieceTokenizer, WordsOverOneHundredBytesAreUnknown) {
  const auto tokenizer = small_tokenizer();
  EXPECT_THAT(tokenizer.encode(std::string(100, 'a')), ::testing::Each(::testing::Ne(1)));
  EXPECT_THAT(tokenizer.encode(std::string(101, 'a')), ElementsAre(1));
  EXPECT_THAT(tokenizer.encode(std::string(51, 'a') + "é"), ::testing::Not(ElementsAre(1)));  // 53 bytes
}

TEST(WordPieceTokenizer, TruncatesAndPads) {
  const auto tokenizer = small_tokenizer();
  EXPECT_THAT(tokenizer.encode("the fox", 4), ElementsAre(2, 7, 0, 0));
  EXPECT_THAT(tokenizer.encode("the quick brown fox.", 3), ElementsAre(2, 3, 4));
  EXPECT_EQ(tokenizer.detokenize(tokenizer.encode("the fox", 4)), "the fox [PAD] [PAD]");
}

TEST(WordPieceTokenizer, EncodeBatchMatchesEncodeRowByRow) {
  const auto tokenizer = small_tokenizer();
  std::vector<std::string> texts = {"the quick brown fox.", "", "unaffable thex", "a a a a a a a a a"};
  for (int i = 0; i < 300; ++i) texts.push_back(std::string(i % 7, 'a') + " the fox" + std::string(i % 3, '.'));
  const int64_t length = 5;
  const auto batch = tokenizer.encode_batch(texts, length);  // [texts, 5]
  ASSERT_EQ(batch.size(), texts.size() * length);
  for (size_t i = 0; i < texts.size(); ++i) {
    EXPECT_EQ(std::vector<int32_t>(batch.begin() + i * length, batch.begin() + (i + 1) * length),
              tokenizer.encode(texts[i], length))
        << texts[i];
  }
}

TEST(WordPieceTokenizer, TokenLookups) {
  const auto tokenizer = small_tokenizer();
  EXPECT_EQ(tokenizer.token_to_id("##ick"), 4);
  EXPECT_EQ(tokenizer.token_to_id("ick"), -1);
  EXPECT_EQ(tokenizer.id_to_token(7), "fox");
  EXPECT_EQ(tokenizer.unknown_id(), 1);
  EXPECT_THROW(tokenizer.id_to_token(17), Error);
  EXPECT_THROW(tokenizer.detokenize(std::vector<int32_t>{-1}), Error);
}

TEST(WordPieceTokenizer, RejectsVocabulariesWithoutTheUnknownToken) {
  EXPECT_THROW(WordPieceTokenizer({"[PAD]", "a"}), Error);
  EXPECT_THROW(WordPieceTokenizer({}), Error);
  EXPECT_THROW(small_tokenizer().encode("a", 0), Error);
}

}  // namespace
}  // namespace fp8kit::text

namespace fp8kit::text {
namespace {

// Slow reference for one word: at each start, try every vocabulary entry and keep the longest
// that matches there (with "##" after the first piece); no piece -> [UNK] for the whole word.
std::vector<int32_t> reference_encode_word(const std::vector<std::string>& vocab, const std::string& word) {
  if (word.size() > 100) return {1};
  std::vector<int32_t> ids;
  for (size_t start = 0; start < word.size();) {
    int32_t best = -1;
    size_t best_length = 0;
    for (size_t id = 0; id < vocab.size(); ++id) {
      std::string piece = vocab[id];
      if (start > 0) {
        if (!piece.starts_with("##") || piece.size() == 2) continue;
        piece = piece.substr(2);
      } else if (piece.starts_with("##") && piece.size() > 2) {
        continue;
      }
      if (piece.size() > best_length && word.compare(start, piece.size(), piece) == 0) {
        // Never end inside a multi-byte character.
        const size_t end = start + piece.size();
        if (end < word.size() && (static_cast<unsigned char>(word[end]) & 0xC0) == 0x80) continue;
        best = static_cast<int32_t>(id), best_length = piece.size();
      }
    }
    if (best < 0) return {1};
    ids.push_back(best);
    start += best_length;
  }
  return ids;
}

TEST(WordPieceTokenizer, MatchesASlowReferenceOnRandomWords) {
  const std::vector<std::string> vocab = {"[PAD]", "[UNK]", "a",   "b",    "é",   "##a", "##b", "##é", "ab",
                                          "aba",   "##ab",  "##ba", "##bé", "bab", "##aaa", "éa", "##é"};
  const WordPieceTokenizer tokenizer(vocab);
  const std::vector<std::string> letters = {"a", "b", "é", "c"};
  std::mt19937 rng(11);
  for (int trial = 0; trial < 2000; ++trial) {
    std::string word;
    for (int n = 1 + static_cast<int>(rng() % (trial % 10 == 0 ? 60 : 8)); n > 0; --n) word += letters[rng() % (trial % 3 ? 3 : 4)];
    EXPECT_EQ(tokenizer.encode(word), reference_encode_word(vocab, word)) << word;
  }
}

}  // namespace
}  // namespace fp8kit::text
