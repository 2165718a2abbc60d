// GPT-2's byte-level alphabet: the table's hand-checked entries and the round trip of all 256 bytes.
#include "text/byte_level.h"

#include <gtest/gtest.h>

#include <set>

namespace fp8kit::text {
namespace {

TEST(ByteLevel, PrintableBytesStandForThemselvesAndTheOthersFollowU0100) {
  EXPECT_EQ(byte_to_code_point('!'), U'!');
  EXPECT_EQ(byte_to_code_point('~'), U'~');
  EXPECT_EQ(byte_to_code_point(0xA1), U'\u00A1');
  EXPECT_EQ(byte_to_code_point(0xFF), U'\u00FF');
  // The 68 others in byte order: 0x00-0x20 are U+0100-U+0120, 0x7F-0xA0 U+0121-U+0142, 0xAD U+0143.
  EXPECT_EQ(byte_to_code_point(0x00), U'\u0100');
  EXPECT_EQ(byte_to_code_point('\n'), U'\u010A');
  EXPECT_EQ(byte_to_code_point(' '), U'\u0120');
  EXPECT_EQ(byte_to_code_point(0x7F), U'\u0121');
  EXPECT_EQ(byte_to_code_point(0xA0), U'\u0142');
  EXPECT_EQ(byte_to_code_point(0xAD), U'\u0143');
  EXPECT_EQ(byte_level_char(' '), "Ġ");
  EXPECT_EQ(byte_level_char('\n'), "Ċ");
  EXPECT_EQ(to_byte_level(" the\n"), "ĠtheĊ");
}

TEST(ByteLevel, EveryByteHasItsOwnCharacterAndComesBack) {
  std::set<char32_t> seen;
  std::string all;
  for (int b = 0; b < 256; ++b) {
    EXPECT_TRUE(seen.insert(byte_to_code_point(static_cast<uint8_t>(b))).second) << b;
    all.push_back(static_cast<char>(b));
  }
  EXPECT_EQ(from_byte_level(to_byte_level(all)), all);
}

TEST(ByteLevel, TextOutsideTheAlphabetIsRefused) {
  EXPECT_EQ(from_byte_level("ĠtheĊ"), " the\n");
  EXPECT_EQ(from_byte_level(""), "");
  EXPECT_FALSE(from_byte_level("a b").has_value());      // a raw space is written as Ġ
  EXPECT_FALSE(from_byte_level("\u0144").has_value());   // past the 68 stand-ins
  EXPECT_FALSE(from_byte_level("日").has_value());
  EXPECT_FALSE(from_byte_level("\xA1").has_value());     // the byte 0xA1 alone is not UTF-8 for U+00A1
}

}  // namespace
}  // namespace fp8kit::text
