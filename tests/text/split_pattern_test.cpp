// The GPT-2 and Llama 3 split patterns on hand-checked strings (the splits Python's `regex` gives
// for the same patterns), invalid UTF-8, and the cover property on random bytes.
#include "text/split_pattern.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

namespace fp8kit::text {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

std::vector<std::string_view> gpt2(std::string_view text) { return split_pieces(text, SplitPattern::kGpt2); }
std::vector<std::string_view> llama3(std::string_view text) { return split_pieces(text, SplitPattern::kLlama3); }

TEST(SplitPattern, Gpt2WordsKeepTheirLeadingSpace) {
  EXPECT_THAT(gpt2("Hello world"), ElementsAre("Hello", " world"));
  EXPECT_THAT(gpt2(""), IsEmpty());
  // A run of spaces gives all but its last to the piece before the word.
  EXPECT_THAT(gpt2("I'm   fine,  thanks!\n\n  ok"),
              ElementsAre("I", "'m", "  ", " fine", ",", " ", " thanks", "!", "\n\n ", " ok"));
  EXPECT_THAT(gpt2("   ok"), ElementsAre("  ", " ok"));
  EXPECT_THAT(gpt2("end  "), ElementsAre("end", "  "));  // trailing white space stays whole
  EXPECT_THAT(gpt2("tab\there"), ElementsAre("tab", "\t", "here"));
  EXPECT_THAT(gpt2("(hello"), ElementsAre("(", "hello"));
}

TEST(SplitPattern, Gpt2ContractionsAreLowercaseOnly) {
  EXPECT_THAT(gpt2("don't'S"), ElementsAre("don", "'t", "'", "S"));
  EXPECT_THAT(gpt2("we're they've I'll I'd"),
              ElementsAre("we", "'re", " they", "'ve", " I", "'ll", " I", "'d"));
  EXPECT_THAT(gpt2("WE'LL"), ElementsAre("WE", "'", "LL"));
}

TEST(SplitPattern, Gpt2DigitsLineBreaksAndUnicode) {
  EXPECT_THAT(gpt2("12345 678"), ElementsAre("12345", " 678"));
  EXPECT_THAT(gpt2("a\r\n\r\nb"), ElementsAre("a", "\r\n\r", "\n", "b"));
  EXPECT_THAT(gpt2("x.\n\ny"), ElementsAre("x", ".", "\n", "\n", "y"));
  // A combining accent (Mn) is neither a letter nor a number.
  EXPECT_THAT(gpt2("cafe\u0301s"), ElementsAre("cafe", "\u0301", "s"));
  EXPECT_THAT(gpt2("hi😀😀 there"), ElementsAre("hi", "😀😀", " there"));
  EXPECT_THAT(gpt2("日本語テキスト"), ElementsAre("日本語テキスト"));      // Lo throughout
  EXPECT_THAT(gpt2("\u0663\u06645x"), ElementsAre("\u0663\u06645", "x"));  // Arabic-Indic digits are Nd
  // U+00A0 is white space (not a space for " ?"); U+2003 and U+3000 too.
  EXPECT_THAT(gpt2("a \u00A0b"), ElementsAre("a", " ", "\u00A0", "b"));
  EXPECT_THAT(gpt2("a\u3000b"), ElementsAre("a", "\u3000", "b"));
}

TEST(SplitPattern, Llama3) {
  EXPECT_THAT(llama3("Hello world"), ElementsAre("Hello", " world"));
  EXPECT_THAT(llama3("I'm   fine,  thanks!\n\n  ok"),
              ElementsAre("I", "'m", "  ", " fine", ",", " ", " thanks", "!\n\n", " ", " ok"));
  // Contractions in any case (U+017F LONG S folds to s), at most three digits at a time.
  EXPECT_THAT(llama3("don't'S WE'LL"), ElementsAre("don", "'t", "'S", " WE", "'LL"));
  EXPECT_THAT(llama3("it'\u017F"), ElementsAre("it", "'\u017F"));
  EXPECT_THAT(llama3("12345 678"), ElementsAre("123", "45", " ", "678"));
  // Line breaks end a white-space piece; one non-letter, non-digit character leads a word.
  EXPECT_THAT(llama3("a\r\n\r\nb"), ElementsAre("a", "\r\n\r\n", "b"));
  EXPECT_THAT(llama3("x.\n\ny"), ElementsAre("x", ".\n\n", "y"));
  EXPECT_THAT(llama3("a \n  b"), ElementsAre("a", " \n", " ", " b"));
  EXPECT_THAT(llama3("(hello tab\there"), ElementsAre("(hello", " tab", "\there"));
  EXPECT_THAT(llama3("cafe\u0301s"), ElementsAre("cafe", "\u0301s"));
  EXPECT_THAT(llama3("a \u00A0b"), ElementsAre("a", " ", "\u00A0b"));
  EXPECT_THAT(llama3("   ok"), ElementsAre("  ", " ok"));
}

TEST(SplitPattern, InvalidBytesAreCharactersOfTheirOwn) {
  // Like punctuation: neither letters, digits nor white space.
  EXPECT_THAT(gpt2("ab\xff\xfe" "cd \xc3x"), ElementsAre("ab", "\xff\xfe", "cd", " \xc3", "x"));
  EXPECT_THAT(llama3("ab\xff" "cd"), ElementsAre("ab", "\xff" "cd"));
  // A truncated sequence, a surrogate and an overlong NUL: each byte on its own, none white space.
  EXPECT_THAT(gpt2("\xe6\x97 \xed\xa0\x80 \xc0\x80"), ElementsAre("\xe6\x97", " \xed\xa0\x80", " \xc0\x80"));
  // The byte 0x85 alone is not NEL (U+0085, white space), which is C2 85.
  EXPECT_THAT(gpt2("a\x85" "b"), ElementsAre("a", "\x85", "b"));
  EXPECT_THAT(gpt2("a\xc2\x85" "b"), ElementsAre("a", "\xc2\x85", "b"));
}

TEST(SplitPattern, PiecesCoverAnyBytesExactly) {
  std::mt19937 rng(7);
  const std::string alphabet = "a Z9'\n\r\t.\xc3\xa9\xe6\x97\xa5\xf0\x9f\x98\x80\xff\x80";
  for (int trial = 0; trial < 3000; ++trial) {
    std::string text;
    const int n = static_cast<int>(rng() % 40);
    for (int i = 0; i < n; ++i) {
      text.push_back(rng() % 4 == 0 ? static_cast<char>(rng() % 256) : alphabet[rng() % alphabet.size()]);
    }
    for (const SplitPattern pattern : {SplitPattern::kGpt2, SplitPattern::kLlama3}) {
      std::string joined;
      for (std::string_view piece : split_pieces(text, pattern)) {
        ASSERT_FALSE(piece.empty());
        ASSERT_EQ(piece.data(), text.data() + joined.size());
        joined += piece;
      }
      ASSERT_EQ(joined, text);
    }
  }
}

TEST(SplitPattern, NamesAndRegexes) {
  for (const SplitPattern pattern : {SplitPattern::kGpt2, SplitPattern::kLlama3}) {
    EXPECT_EQ(split_pattern_from_regex(split_pattern_regex(pattern)), pattern);
    EXPECT_EQ(split_pattern_from_name(split_pattern_name(pattern)), pattern);
  }
  EXPECT_EQ(split_pattern_regex(SplitPattern::kGpt2),
            R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)");
  EXPECT_FALSE(split_pattern_from_regex("\\s+").has_value());
  EXPECT_FALSE(split_pattern_from_name("gpt4").has_value());
}

}  // namespace
}  // namespace fp8kit::text
