// The two split regexes as small hand-written matchers: at each position the regex's alternatives
// are tried in order, as a backtracking engine would, and the first one that matches wins.
#include "text/split_pattern.h"

#include "text/utf8.h"

#include <utf8proc.h>

#include <array>
#include <climits>
#include <cstdint>

namespace fp8kit::text {

namespace {

constexpr std::string_view kGpt2Regex = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr std::string_view kLlama3Regex =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

enum class Cls : uint8_t { kLetter, kNumber, kSpace, kOther, kEnd };

// Unicode's White_Space property (PropList.txt), which is what \s means in these regexes.
bool is_white_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

Cls classify(char32_t c) {
  if (is_white_space(c)) return Cls::kSpace;
  switch (utf8proc_category(static_cast<utf8proc_int32_t>(c))) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
      return Cls::kLetter;
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_NO:
      return Cls::kNumber;
    default:
      return Cls::kOther;
  }
}

const std::array<Cls, 128> kAscii = [] {
  std::array<Cls, 128> table{};
  for (char32_t c = 0; c < 128; ++c) table[c] = classify(c);
  return table;
}();

struct Char {
  char32_t c;
  int len;
  Cls cls;
};

// The non-ASCII character at text[pos]; an invalid byte is itself, of class kOther.
Char decode_at(std::string_view text, size_t pos) {
  char32_t c;
  const int len = utf8_decode(text, pos, &c);
  if (len == 1) return {c, 1, Cls::kOther};  // not well-formed UTF-8
  return {c, len, classify(c)};
}

// The character at text[pos]; past the end, kEnd. ASCII (most text) inline, the rest out of line.
inline Char char_at(std::string_view text, size_t pos) {
  if (pos >= text.size()) return {0, 0, Cls::kEnd};
  const auto byte = static_cast<unsigned char>(text[pos]);
  if (byte < 0x80) return {byte, 1, kAscii[byte]};
  return decode_at(text, pos);
}

// End of the run of characters of class `cls` starting at `pos`, at most `max_chars` of them.
size_t run_end(std::string_view text, size_t pos, Cls cls, int max_chars = INT32_MAX) {
  for (int n = 0; n < max_chars; ++n) {
    const Char ch = char_at(text, pos);
    if (ch.cls != cls) break;
    pos += ch.len;
  }
  return pos;
}

// End of 's|'t|'re|'ve|'m|'ll|'d at `pos` (which holds '\''), or 0; `fold` matches any case
// (and U+017F LONG S as s, as Unicode case folding does).
size_t contraction_end(std::string_view text, size_t pos, bool fold) {
  const Char first = char_at(text, pos + 1);
  const auto lower = [fold](char32_t c) -> char32_t {
    if (!fold) return c;
    if (c >= 'A' && c <= 'Z') return c - 'A' + 'a';
    return c == 0x17F ? U's' : c;
  };
  const char32_t a = lower(first.c);
  if (a == 's' || a == 't' || a == 'm' || a == 'd') return pos + 1 + first.len;
  const char32_t b = lower(char_at(text, pos + 1 + first.len).c);
  if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l')) return pos + 3;
  return 0;
}

// \s+(?!\S)|\s+ at `pos`, a white-space character: the whole run when it ends the text or is one
// character, else the run less its last character (which then leads the next piece).
size_t white_space_end(std::string_view text, size_t pos) {
  const size_t end = run_end(text, pos, Cls::kSpace);
  if (end == text.size()) return end;
  size_t last = pos;  // start of the run's last character
  for (size_t p = pos; p < end; p += char_at(text, p).len) last = p;
  return last == pos ? end : last;
}

size_t gpt2_match(std::string_view text, size_t pos) {
  const Char c = char_at(text, pos);
  if (c.c == '\'') {
    if (const size_t end = contraction_end(text, pos, false)) return end;
  }
  //  ?\p{L}+ |  ?\p{N}+ |  ?[^\s\p{L}\p{N}]+
  if (c.c == ' ') {
    const Char next = char_at(text, pos + 1);
    if (next.cls == Cls::kLetter || next.cls == Cls::kNumber || next.cls == Cls::kOther) {
      return run_end(text, pos + 1, next.cls);
    }
  }
  if (c.cls != Cls::kSpace) return run_end(text, pos, c.cls);
  return white_space_end(text, pos);
}

size_t llama3_match(std::string_view text, size_t pos) {
  const Char c = char_at(text, pos);
  if (c.c == '\'') {
    if (const size_t end = contraction_end(text, pos, true)) return end;
  }
  // [^\r\n\p{L}\p{N}]?\p{L}+
  if (c.cls == Cls::kLetter) return run_end(text, pos, Cls::kLetter);
  if (c.cls != Cls::kNumber && c.c != '\r' && c.c != '\n' && char_at(text, pos + c.len).cls == Cls::kLetter) {
    return run_end(text, pos + c.len, Cls::kLetter);
  }
  // \p{N}{1,3}
  if (c.cls == Cls::kNumber) return run_end(text, pos, Cls::kNumber, 3);
  //  ?[^\s\p{L}\p{N}]+[\r\n]*
  size_t other = c.cls == Cls::kOther ? pos : std::string_view::npos;
  if (c.c == ' ' && char_at(text, pos + 1).cls == Cls::kOther) other = pos + 1;
  if (other != std::string_view::npos) {
    size_t end = run_end(text, other, Cls::kOther);
    while (end < text.size() && (text[end] == '\r' || text[end] == '\n')) ++end;
    return end;
  }
  // \s*[\r\n]+ : up to the run's last line break
  const size_t end = run_end(text, pos, Cls::kSpace);
  size_t last_break = std::string_view::npos;
  for (size_t p = pos; p < end; p += char_at(text, p).len) {
    if (text[p] == '\r' || text[p] == '\n') last_break = p;
  }
  if (last_break != std::string_view::npos) return last_break + 1;
  return white_space_end(text, pos);
}

}  // namespace

std::string_view split_pattern_regex(SplitPattern pattern) {
  return pattern == SplitPattern::kGpt2 ? kGpt2Regex : kLlama3Regex;
}

std::optional<SplitPattern> split_pattern_from_regex(std::string_view regex) {
  if (regex == kGpt2Regex) return SplitPattern::kGpt2;
  if (regex == kLlama3Regex) return SplitPattern::kLlama3;
  return std::nullopt;
}

std::string_view split_pattern_name(SplitPattern pattern) {
  return pattern == SplitPattern::kGpt2 ? "gpt2" : "llama3";
}

std::optional<SplitPattern> split_pattern_from_name(std::string_view name) {
  if (name == "gpt2") return SplitPattern::kGpt2;
  if (name == "llama3") return SplitPattern::kLlama3;
  return std::nullopt;
}

void split_pieces(std::string_view text, SplitPattern pattern, std::vector<std::string_view>& pieces) {
  const auto match = pattern == SplitPattern::kGpt2 ? gpt2_match : llama3_match;
  for (size_t pos = 0; pos < text.size();) {
    const size_t end = match(text, pos);
    pieces.push_back(text.substr(pos, end - pos));
    pos = end;
  }
}

std::vector<std::string_view> split_pieces(std::string_view text, SplitPattern pattern) {
  std::vector<std::string_view> pieces;
  split_pieces(text, pattern, pieces);
  return pieces;
}

}  // namespace fp8kit::text
