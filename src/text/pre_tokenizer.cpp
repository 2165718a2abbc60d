// Character classes of the BERT-style pre-tokenizer; the split loop itself is inline in the header.
#include "text/pre_tokenizer.h"

#include "text/utf8.h"

#include <utf8proc.h>

namespace fp8kit::text {

namespace {

// CJK ideograph blocks split into single characters (BERT's _is_chinese_char, as KerasHub).
bool is_cjk(char32_t c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) || (c >= 0x20000 && c <= 0x2A6DF) ||
         (c >= 0x2A700 && c <= 0x2B73F) || (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B820 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

constexpr CharClass ascii_class(unsigned c) {
  // RE2's \s is exactly these five; the other ASCII controls are Cc (also separators).
  if (c == ' ' || c == '\t' || c == '\n' || c == '\f' || c == '\r' || c < 0x20 || c == 0x7F) {
    return CharClass::kSeparator;
  }
  if ((c >= 0x21 && c <= 0x2F) || (c >= 0x3A && c <= 0x40) || (c >= 0x5B && c <= 0x60) || (c >= 0x7B && c <= 0x7E)) {
    return CharClass::kIsolated;
  }
  return CharClass::kWord;
}

}  // namespace

const CharClass kAsciiClass[128] = {
#define FP8KIT_ROW(r)                                                                                 \
  ascii_class(r + 0), ascii_class(r + 1), ascii_class(r + 2), ascii_class(r + 3), ascii_class(r + 4), \
      ascii_class(r + 5), ascii_class(r + 6), ascii_class(r + 7)
    FP8KIT_ROW(0),  FP8KIT_ROW(8),  FP8KIT_ROW(16), FP8KIT_ROW(24), FP8KIT_ROW(32),  FP8KIT_ROW(40),
    FP8KIT_ROW(48), FP8KIT_ROW(56), FP8KIT_ROW(64), FP8KIT_ROW(72), FP8KIT_ROW(80),  FP8KIT_ROW(88),
    FP8KIT_ROW(96), FP8KIT_ROW(104), FP8KIT_ROW(112), FP8KIT_ROW(120),
#undef FP8KIT_ROW
};

CharClass classify_code_point(char32_t c) {
  if (c < 0x80) return kAsciiClass[c];
  if (is_cjk(c)) return CharClass::kIsolated;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_CC:
    case UTF8PROC_CATEGORY_CF:
      return CharClass::kSeparator;
    case UTF8PROC_CATEGORY_PC:
    case UTF8PROC_CATEGORY_PD:
    case UTF8PROC_CATEGORY_PS:
    case UTF8PROC_CATEGORY_PE:
    case UTF8PROC_CATEGORY_PI:
    case UTF8PROC_CATEGORY_PF:
    case UTF8PROC_CATEGORY_PO:
      return CharClass::kIsolated;
    default:
      return CharClass::kWord;
  }
}

int classify_at(std::string_view text, size_t pos, CharClass* cls) {
  char32_t c;
  const int len = utf8_decode(text, pos, &c);
  // An invalid byte decodes as itself (0x80-0xFF); keep it inside words rather than reading it as Latin-1.
  *cls = (len == 1 && c >= 0x80) ? CharClass::kWord : classify_code_point(c);
  return len;
}

std::vector<std::string_view> pre_tokenize(std::string_view text) {
  std::vector<std::string_view> words;
  pre_tokenize_each(text, [&](std::string_view word) { words.push_back(word); });
  return words;
}

}  // namespace fp8kit::text
