// BPE encoding: merges by rank, the round trip of any bytes, added tokens, the word cache and the
// batch, and a check against GPT-2's original merge loop on a learned tokenizer.
#include "text/bpe_tokenizer.h"

#include "bpe_models.h"
#include "common/error_of.h"
#include "text/bpe_learner.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <random>

namespace fp8kit::text {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::byte_model;
using testing::error_of;

// The tokens (as bytes) of `text`.
std::vector<std::string> pieces(const BpeTokenizer& tokenizer, std::string_view text) {
  std::vector<std::string> out;
  for (int32_t id : tokenizer.encode(text)) out.push_back(tokenizer.token_bytes(id));
  return out;
}

TEST(BpeTokenizer, MergesApplyByRankWithinEachPiece) {
  const BpeTokenizer ab_first(byte_model({{"a", "b"}, {"b", "c"}}));
  EXPECT_THAT(pieces(ab_first, "abc"), ElementsAre("ab", "c"));
  const BpeTokenizer bc_first(byte_model({{"b", "c"}, {"a", "b"}}));
  EXPECT_THAT(pieces(bc_first, "abc"), ElementsAre("a", "bc"));
  // Equal pairs merge leftmost first; merged tokens merge again; never across pieces (" ab" is a piece).
  const BpeTokenizer chain(byte_model({{"a", "a"}, {"aa", "a"}, {" ", "b"}}));
  EXPECT_THAT(pieces(chain, "aaaaa"), ElementsAre("aa", "aaa"));  // aa aa a, then (aa, a)
  EXPECT_THAT(pieces(chain, "ab b"), ElementsAre("a", "b", " b"));
  EXPECT_EQ(ab_first.vocab_size(), 258);
  EXPECT_EQ(ab_first.token_id("ab"), 256);
  EXPECT_EQ(ab_first.token_id("xyz"), std::nullopt);
  EXPECT_THAT(ab_first.encode(""), ::testing::IsEmpty());
}

TEST(BpeTokenizer, IgnoreMergesTakesAWholePieceThatIsAToken) {
  BpeModel model = byte_model({{"a", "b"}});
  model.tokens.push_back("abc");  // in the vocabulary, made by no merge
  EXPECT_THAT(pieces(BpeTokenizer(model), "abc"), ElementsAre("ab", "c"));
  model.ignore_merges = true;
  EXPECT_THAT(pieces(BpeTokenizer(model), "abc abc"), ElementsAre("abc", " ", "ab", "c"));
}

TEST(BpeTokenizer, AnyBytesRoundTrip) {
  const std::string corpus =
      "the cat sat on the mat. The other cat's hat, the \xc3\xa9t\xc3\xa9 caf\xc3\xa9 \xe6\x97\xa5\xe6\x9c\xac "
      "1234 5678\r\n\ttabs\t and  spaces   here \xf0\x9f\x98\x80!";
  const std::vector<std::string> texts(20, corpus);
  std::mt19937 rng(11);
  for (const SplitPattern pattern : {SplitPattern::kGpt2, SplitPattern::kLlama3}) {
    const BpeTokenizer tokenizer = learn_bpe(texts, {.vocab_size = 400, .pattern = pattern});
    ASSERT_GT(tokenizer.model().merges.size(), 40u);
    for (int trial = 0; trial < 3000; ++trial) {
      std::string text;
      const int n = static_cast<int>(rng() % 64);
      for (int i = 0; i < n; ++i) {
        text.push_back(rng() % 2 ? static_cast<char>(rng() % 256) : corpus[rng() % corpus.size()]);
      }
      const std::vector<int32_t> ids = tokenizer.encode(text);
      ASSERT_EQ(tokenizer.decode(ids), text) << trial;
    }
    for (const std::string& text :
         {std::string("cafe\u0301 na\u00efve \U0001F468\u200D\U0001F469\u200D\U0001F467 \u4E2D\u6587 \u0663\u0664 x\r\n\r\ny\t\t1234567"),
          std::string(1000, 'a'), std::string("\0\0a\0", 4), std::string("\xff\xfe\xed\xa0\x80\xc0\x80\xf4\x90\x80\x80")}) {
      EXPECT_EQ(tokenizer.decode(tokenizer.encode(text)), text);
    }
  }
}

TEST(BpeTokenizer, AddedTokensAreTextUnlessParsed) {
  BpeModel model = byte_model({{"<", "|"}});
  model.tokens.insert(model.tokens.begin(), "<|endoftext|>");  // id 0; byte ids shift by one
  for (auto& [a, b] : model.merges) ++a, ++b;
  model.added_tokens = {{0, true}};
  const BpeTokenizer tokenizer(model);
  EXPECT_EQ(tokenizer.eos_id(), 0);
  EXPECT_EQ(tokenizer.token_id("<|endoftext|>"), 0);
  const std::string text = "a<|endoftext|>b<|endoftext|>";
  const std::vector<int32_t> plain = tokenizer.encode(text);
  EXPECT_EQ(std::count(plain.begin(), plain.end(), 0), 0);
  EXPECT_EQ(tokenizer.decode(plain), text);
  const std::vector<int32_t> parsed = tokenizer.encode(text, SpecialTokens::kParse);
  EXPECT_THAT(parsed, ElementsAre('a' + 1, 0, 'b' + 1, 0));
  EXPECT_EQ(tokenizer.decode(parsed), text);
}

// An added token that is not special is matched in every mode, as Hugging Face matches it with
// encode_special_tokens (tokenizers trained with domain or chat tokens give the same ids in both).
TEST(BpeTokenizer, AddedTokensThatAreNotSpecialAreAlwaysMatched) {
  BpeModel model = byte_model({});
  model.tokens.push_back("<movie>");
  model.tokens.push_back("<|endoftext|>");
  model.added_tokens = {{256, false}, {257, true}};
  const BpeTokenizer tokenizer(model);
  const std::string text = "a<movie>b<|endoftext|>";
  EXPECT_THAT(tokenizer.encode(text), ElementsAre('a', 256, 'b', '<', '|', 'e', 'n', 'd', 'o', 'f', 't', 'e', 'x',
                                                  't', '|', '>'));
  EXPECT_THAT(tokenizer.encode(text, SpecialTokens::kParse), ElementsAre('a', 256, 'b', 257));
}

TEST(BpeTokenizer, CacheAndBatchGiveTheSameIds) {
  const std::vector<std::string> texts = {"the cat sat", "on the mat", "the cat", "", "mat mat mat \xff"};
  const BpeTokenizer tokenizer = learn_bpe(texts, {.vocab_size = 280, .min_pair_count = 1});
  BpeWordCache cache;
  const auto batch = tokenizer.encode_batch(texts);
  ASSERT_EQ(batch.size(), texts.size());
  for (size_t i = 0; i < texts.size(); ++i) {
    std::vector<int32_t> ids;
    tokenizer.encode(texts[i], ids, cache);
    EXPECT_EQ(ids, tokenizer.encode(texts[i])) << i;
    EXPECT_EQ(batch[i], ids) << i;
  }
}

// GPT-2's encoder.py: merge the lowest-ranked pair everywhere in the word, repeat.
std::vector<int32_t> reference_encode_piece(const BpeTokenizer& tokenizer, std::string_view piece) {
  const BpeModel& model = tokenizer.model();
  std::vector<int32_t> word;
  for (char ch : piece) word.push_back(*tokenizer.token_id(std::string(1, ch)));
  while (word.size() > 1) {
    size_t best = SIZE_MAX;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      for (size_t rank = 0; rank < std::min(best, model.merges.size()); ++rank) {
        if (model.merges[rank] == std::pair(word[i], word[i + 1])) best = rank;
      }
    }
    if (best == SIZE_MAX) break;
    const auto [a, b] = model.merges[best];
    const int32_t merged = *tokenizer.token_id(tokenizer.token_bytes(a) + tokenizer.token_bytes(b));
    std::vector<int32_t> next;
    for (size_t i = 0; i < word.size(); ++i) {
      if (i + 1 < word.size() && word[i] == a && word[i + 1] == b) {
        next.push_back(merged), ++i;
      } else {
        next.push_back(word[i]);
      }
    }
    word = std::move(next);
  }
  return word;
}

TEST(BpeTokenizer, AgreesWithGpt2sMergeLoop) {
  std::mt19937 rng(3);
  const std::vector<std::string> words = {"the", "then", "there", "other", "mother", "aaaa", "abab", "banana", "1999"};
  std::vector<std::string> texts;
  for (int t = 0; t < 200; ++t) {
    std::string text;
    for (int i = 0; i < 20; ++i) text += (i ? " " : "") + words[rng() % words.size()];
    texts.push_back(text);
  }
  const BpeTokenizer tokenizer = learn_bpe(texts, {.vocab_size = 320, .special_tokens = {}});
  for (const std::string& text : texts) {
    std::vector<int32_t> expected;
    for (std::string_view piece : split_pieces(text, SplitPattern::kGpt2)) {
      for (int32_t id : reference_encode_piece(tokenizer, piece)) expected.push_back(id);
    }
    ASSERT_EQ(tokenizer.encode(text), expected) << text;
  }
}

TEST(BpeTokenizer, RefusesInconsistentModels) {
  BpeModel model = byte_model({{"a", "b"}});
  model.tokens.pop_back();  // "ab" gone
  EXPECT_THAT(error_of([&] { BpeTokenizer{model}; }), HasSubstr("model.merges[0]: \"a b\" makes \"ab\", which is not in model.vocab"));
  model = byte_model({});
  model.tokens.push_back("a");
  EXPECT_EQ(error_of([&] { BpeTokenizer{model}; }), "model.vocab: ids 97 and 256 are both \"a\"");
  model = byte_model({});
  model.tokens[32] = "xy";
  EXPECT_THAT(error_of([&] { BpeTokenizer{model}; }),
              HasSubstr("model.vocab has no token \"Ġ\" for the byte 0x20; a byte-level BPE needs all 256"));
  model = byte_model({});
  model.added_tokens = {{300, true}};
  EXPECT_EQ(error_of([&] { BpeTokenizer{model}; }), "added_tokens: id 300 is outside the vocabulary of 256 tokens");
  const BpeTokenizer tokenizer(byte_model({}));
  EXPECT_EQ(error_of([&] { tokenizer.decode(std::vector<int32_t>{1, 256}); }),
            "token id 256 is outside the vocabulary of 256 tokens");
}

}  // namespace
}  // namespace fp8kit::text
