// UTF-8 validation with replacement and ASCII lowercasing.
#include "text/utf8.h"

#include <gtest/gtest.h>

namespace fp8kit::text {
namespace {

TEST(Utf8, ValidTextIsUnchanged) {
  int64_t replaced = 0;
  EXPECT_EQ(decode_utf8_lossy("plain", &replaced), "plain");
  EXPECT_EQ(decode_utf8_lossy("é日😀", &replaced), "é日😀");
  EXPECT_EQ(replaced, 0);
  EXPECT_TRUE(is_valid_utf8("é日😀"));
}

TEST(Utf8, InvalidBytesBecomeReplacementCharacters) {
  int64_t replaced = 0;
  // Latin-1 é, a stray continuation byte, a truncated 3-byte sequence at the end.
  EXPECT_EQ(decode_utf8_lossy("caf\xE9 \x80x \xE6\x97", &replaced), "caf\uFFFD \uFFFDx \uFFFD\uFFFD");
  EXPECT_EQ(replaced, 4);
  EXPECT_FALSE(is_valid_utf8("caf\xE9"));
}

TEST(Utf8, OverlongAndSurrogateSequencesAreInvalid) {
  EXPECT_FALSE(is_valid_utf8("\xC0\xAF"));          // overlong '/'
  EXPECT_FALSE(is_valid_utf8("\xED\xA0\x80"));      // U+D800
  EXPECT_FALSE(is_valid_utf8("\xF4\x90\x80\x80"));  // above U+10FFFF
  EXPECT_TRUE(is_valid_utf8(std::string("a\0b", 3)));
}

TEST(Utf8, LowercasesAsciiOnly) {
  std::string text = "ÉTÉ Great MOVIE ÀÖ";
  ascii_lowercase(text);
  EXPECT_EQ(text, "ÉtÉ great movie ÀÖ");
}

TEST(Utf8, DecodeAndAppendRoundTrip) {
  const std::string text = "aé日😀";
  std::string back;
  for (size_t pos = 0; pos < text.size();) {
    char32_t c;
    pos += utf8_decode(text, pos, &c);
    utf8_append(back, c);
  }
  EXPECT_EQ(back, text);
}

}  // namespace
}  // namespace fp8kit::text
