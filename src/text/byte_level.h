// GPT-2's byte-level alphabet: each of the 256 byte values is written as one printable Unicode
// character (bytes_to_unicode), so any byte string, invalid UTF-8 included, is a string of tokens.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace fp8kit::text {

// The code point that stands for `byte`: printable Latin-1 bytes ('!'-'~', U+00A1-U+00AC,
// U+00AE-U+00FF) stand for themselves, the other 68 for U+0100, U+0101, ... in byte order
// (so ' ' is U+0120 'Ġ' and '\n' is U+010A 'Ċ').
char32_t byte_to_code_point(uint8_t byte);

// The UTF-8 encoding of byte_to_code_point(byte) (one or two bytes).
std::string_view byte_level_char(uint8_t byte);

// `bytes` with every byte written as its byte-level character.
std::string to_byte_level(std::string_view bytes);

// The bytes a byte-level string stands for; nullopt when it holds a character outside the
// alphabet (or is not valid UTF-8).
std::optional<std::string> from_byte_level(std::string_view text);

}  // namespace fp8kit::text
