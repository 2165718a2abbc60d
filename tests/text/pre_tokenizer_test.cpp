// Pre-tokenizer: the spec's split rules and their edge cases.
#include "text/pre_tokenizer.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <random>

namespace fp8kit::text {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

TEST(PreTokenizer, HtmlLineBreaks) {
  EXPECT_THAT(pre_tokenize("films.<br /><br />joe"),
              ElementsAre("films", ".", "<", "br", "/", ">", "<", "br", "/", ">", "joe"));
}

TEST(PreTokenizer, AsciiWhitespaceSplitsAndIsDropped) {
  EXPECT_THAT(pre_tokenize(" a\tb\nc\rd\fe  "), ElementsAre("a", "b", "c", "d", "e"));
  EXPECT_THAT(pre_tokenize(""), IsEmpty());
  EXPECT_THAT(pre_tokenize(" \t\n"), IsEmpty());
}

TEST(PreTokenizer, AsciiPunctuationAndSymbolsAreSingleTokens) {
  // ^ $ ` + < = > | ~ are symbols in Unicode, punctuation for BERT.
  EXPECT_THAT(pre_tokenize("a^b$c`d+e|f~g"), ElementsAre("a", "^", "b", "$", "c", "`", "d", "+", "e", "|", "f", "~", "g"));
  EXPECT_THAT(pre_tokenize("don't \"x\"..."), ElementsAre("don", "'", "t", "\"", "x", "\"", ".", ".", "."));
  EXPECT_THAT(pre_tokenize("1/2 3.5"), ElementsAre("1", "/", "2", "3", ".", "5"));
}

TEST(PreTokenizer, ControlAndFormatCharactersSplitAndAreDropped) {
  // \v and \x01 (Cc), U+0085 (Cc), U+200B zero width space (Cf), U+00AD soft hyphen (Cf).
  EXPECT_THAT(pre_tokenize("a\vb\x01" "c\u0085d\u200Be\u00ADf"), ElementsAre("a", "b", "c", "d", "e", "f"));
}

TEST(PreTokenizer, NoBreakSpaceAndOtherSpacesStayInsideWords) {
  // U+00A0 (Zs) is not matched by RE2's \s, nor U+2003 EM SPACE.
  EXPECT_THAT(pre_tokenize("a\u00A0b c\u2003d"), ElementsAre("a\u00A0b", "c\u2003d"));
}

TEST(PreTokenizer, AccentsAreKept) {
  EXPECT_THAT(pre_tokenize("café déjà-vu"), ElementsAre("café", "déjà", "-", "vu"));
  // A combining accent (Mn) stays with its letter.
  EXPECT_THAT(pre_tokenize("cafe\u0301"), ElementsAre("cafe\u0301"));
}

TEST(PreTokenizer, UnicodePunctuationIsSplit) {
  // U+2014 EM DASH (Pd), U+201C/U+201D quotes (Pi/Pf), U+00BF (Po), U+3002 (Po), U+00AB (Pi).
  EXPECT_THAT(pre_tokenize("a\u2014b \u201Cc\u201D \u00BFd\u3002 \u00ABe"),
              ElementsAre("a", "\u2014", "b", "\u201C", "c", "\u201D", "\u00BF", "d", "\u3002", "\u00AB", "e"));
}

TEST(PreTokenizer, CjkIdeographsAreSingleTokens) {
  EXPECT_THAT(pre_tokenize("ab日本語cd"), ElementsAre("ab", "日", "本", "語", "cd"));
  // Extension B (U+20000) and compatibility ideographs (U+F900) too; Hiragana and Hangul are not split.
  EXPECT_THAT(pre_tokenize("x\U00020000\uF900y"), ElementsAre("x", "\U00020000", "\uF900", "y"));
  EXPECT_THAT(pre_tokenize("ひらがな한국어"), ElementsAre("ひらがな한국어"));
}

TEST(PreTokenizer, SymbolsAndEmojiStayInsideWords) {
  // So (emoji, ©), Sc (€), Sk (U+02C6 is Lm; U+00B4 acute accent is Sk) are not punctuation.
  EXPECT_THAT(pre_tokenize("great😀 ©2009 5€ it\u00B4s"), ElementsAre("great😀", "©2009", "5€", "it\u00B4s"));
}

TEST(PreTokenizer, InvalidBytesStayInsideWords) {
  EXPECT_THAT(pre_tokenize("a\xFF" "b c\xC3"), ElementsAre("a\xFF" "b", "c\xC3"));
}

TEST(PreTokenizer, ClassifyCodePoint) {
  EXPECT_EQ(classify_code_point(U'a'), CharClass::kWord);
  EXPECT_EQ(classify_code_point(U' '), CharClass::kSeparator);
  EXPECT_EQ(classify_code_point(U'\u00A0'), CharClass::kWord);
  EXPECT_EQ(classify_code_point(U'\uFEFF'), CharClass::kSeparator);  // BOM is Cf
  EXPECT_EQ(classify_code_point(U'\u2026'), CharClass::kIsolated);   // ellipsis is Po
  EXPECT_EQ(classify_code_point(U'\uFFFD'), CharClass::kWord);       // replacement character is So
}

}  // namespace
}  // namespace fp8kit::text

namespace fp8kit::text {
namespace {

// The spec's ASCII rules, written out independently of the library's table.
CharClass spec_ascii_class(unsigned c) {
  if (c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r') return CharClass::kSeparator;  // RE2 \s
  if (c < 0x20 || c == 0x7F) return CharClass::kSeparator;                                          // Cc
  const std::string punctuation = "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~";
  if (punctuation.find(static_cast<char>(c)) != std::string::npos) return CharClass::kIsolated;
  return CharClass::kWord;
}

TEST(PreTokenizer, EveryAsciiCharacterFollowsTheSpec) {
  for (unsigned c = 0; c < 128; ++c) {
    EXPECT_EQ(classify_code_point(c), spec_ascii_class(c)) << "U+" << std::hex << c;
  }
}

// Slow reference: decode every character, classify it, and build words one character at a time.
std::vector<std::string> reference_pre_tokenize(const std::string& text) {
  std::vector<std::string> words;
  std::string word;
  for (size_t pos = 0; pos < text.size();) {
    CharClass cls;
    const int len = classify_at(text, pos, &cls);
    const std::string ch = text.substr(pos, len);
    pos += len;
    if (cls == CharClass::kWord) {
      word += ch;
      continue;
    }
    if (!word.empty()) words.push_back(word), word.clear();
    if (cls == CharClass::kIsolated) words.push_back(ch);
  }
  if (!word.empty()) words.push_back(word);
  return words;
}

TEST(PreTokenizer, MatchesASlowReferenceOnRandomText) {
  const std::vector<std::string> pieces = {"a", "Z", "0", " ", "\t", "\n", ".", "<", "#", "\x01", "é", "\u00A0",
                                           "日", "\u2014", "\u200B", "😀", "\u0301", "\xFF", "\xC3", "br", "'"};
  std::mt19937 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    std::string text;
    for (int n = static_cast<int>(rng() % 30); n > 0; --n) text += pieces[rng() % pieces.size()];
    const auto fast = pre_tokenize(text);
    EXPECT_EQ(std::vector<std::string>(fast.begin(), fast.end()), reference_pre_tokenize(text)) << text;
  }
}

}  // namespace
}  // namespace fp8kit::text
