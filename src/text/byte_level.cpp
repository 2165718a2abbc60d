// The byte-level alphabet's two tables, built once.
#include "text/byte_level.h"

#include "text/utf8.h"

#include <array>

namespace fp8kit::text {

namespace {

struct Tables {
  std::array<char32_t, 256> code_point{};
  std::array<std::string, 256> utf8;
  std::array<int16_t, 324> byte_of{};  // code point (all below U+0144) -> byte, or -1

  Tables() {
    byte_of.fill(-1);
    char32_t next = 0x100;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      code_point[b] = printable ? static_cast<char32_t>(b) : next++;
      utf8_append(utf8[b], code_point[b]);
      byte_of[code_point[b]] = static_cast<int16_t>(b);
    }
  }
};

const Tables& tables() {
  static const Tables t;
  return t;
}

}  // namespace

char32_t byte_to_code_point(uint8_t byte) { return tables().code_point[byte]; }

std::string_view byte_level_char(uint8_t byte) { return tables().utf8[byte]; }

std::string to_byte_level(std::string_view bytes) {
  const Tables& t = tables();
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char ch : bytes) out += t.utf8[static_cast<unsigned char>(ch)];
  return out;
}

std::optional<std::string> from_byte_level(std::string_view text) {
  const Tables& t = tables();
  std::string out;
  out.reserve(text.size());
  for (size_t pos = 0; pos < text.size();) {
    char32_t c;
    const int len = utf8_decode(text, pos, &c);
    // An invalid byte decodes as itself (0x80-0xFF) with length 1; none of those is a valid character here.
    if ((len == 1 && c >= 0x80) || c >= t.byte_of.size() || t.byte_of[c] < 0) return std::nullopt;
    out.push_back(static_cast<char>(t.byte_of[c]));
    pos += len;
  }
  return out;
}

}  // namespace fp8kit::text
