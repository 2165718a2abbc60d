// BERT-style pre-tokenizer of the seed experiment (KerasHub's `pretokenize` with split=True,
// split_on_cjk=True, no lowercasing or accent stripping): splits text into words before WordPiece.
#pragma once

#include <string_view>
#include <vector>

namespace fp8kit::text {

// Splits valid UTF-8 `text` into words, as views into `text`:
// - ASCII whitespace (\t \n \f \r, space) and Unicode control/format characters (Cc, Cf) separate
//   words and are dropped;
// - punctuation (ASCII 0x21-0x2F, 0x3A-0x40, 0x5B-0x60, 0x7B-0x7E and every Unicode P* character)
//   and CJK ideographs become one-character words;
// - everything else (letters, digits, symbols So/Sc/Sk, U+00A0, other spaces) stays inside words.
// Invalid UTF-8 bytes are kept inside words as single characters (callers pass decoded text).
// Example: "a<br />b" -> "a", "<", "br", "/", ">", "b".
std::vector<std::string_view> pre_tokenize(std::string_view text);

// Character classes of the pre-tokenizer: inside a word, a dropped separator, or a one-character word.
enum class CharClass : unsigned char { kWord, kSeparator, kIsolated };

// Class of any code point (Unicode categories from utf8proc).
CharClass classify_code_point(char32_t c);

// Class of each ASCII byte (0x00-0x7F), for the fast path.
extern const CharClass kAsciiClass[128];

// Length in bytes and class of the character starting at text[pos]; an invalid byte counts as a
// one-byte word character.
int classify_at(std::string_view text, size_t pos, CharClass* cls);

// Same split as pre_tokenize, calling `emit(word)` for each word instead of building a vector.
template <typename Emit>
void pre_tokenize_each(std::string_view text, Emit&& emit) {
  size_t word_start = 0;
  bool in_word = false;
  size_t pos = 0;
  while (pos < text.size()) {
    const auto byte = static_cast<unsigned char>(text[pos]);
    CharClass cls;
    int len = 1;
    if (byte < 0x80) {
      cls = kAsciiClass[byte];
    } else {
      len = classify_at(text, pos, &cls);
    }
    if (cls == CharClass::kWord) {
      if (!in_word) word_start = pos, in_word = true;
    } else {
      if (in_word) emit(text.substr(word_start, pos - word_start)), in_word = false;
      if (cls == CharClass::kIsolated) emit(text.substr(pos, len));
    }
    pos += len;
  }
  if (in_word) emit(text.substr(word_start));
}

}  // namespace fp8kit::text
