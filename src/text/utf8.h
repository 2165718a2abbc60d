// UTF-8 helpers for text input: validation with replacement (U+FFFD) and ASCII-only lowercasing,
// the two normalisations the seed experiment applies to raw review files.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace fp8kit::text {

// Returns `bytes` as valid UTF-8: every byte that does not start a well-formed sequence (stray
// continuation bytes, overlong forms, surrogates, truncated sequences) becomes U+FFFD.
// `replaced`, when given, is increased by the number of replacements made.
std::string decode_utf8_lossy(std::string_view bytes, int64_t* replaced = nullptr);

// True when `bytes` is well-formed UTF-8.
bool is_valid_utf8(std::string_view bytes);

// Lowercases ASCII A-Z in place; every other byte (so every non-ASCII character) is unchanged,
// as TensorFlow's tf.strings.lower does by default.
void ascii_lowercase(std::string& text);

// Decodes the code point starting at text[pos] (text must be valid UTF-8); returns its length in bytes.
int utf8_decode(std::string_view text, size_t pos, char32_t* code_point);

// Appends the UTF-8 encoding of `code_point` to `out`.
void utf8_append(std::string& out, char32_t code_point);

}  // namespace fp8kit::text
