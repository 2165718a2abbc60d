// UTF-8 validation with replacement and ASCII lowercasing (utf8proc does the decoding).
#include "text/utf8.h"

#include <utf8proc.h>

namespace fp8kit::text {

namespace {

// Length of the leading run of ASCII bytes.
size_t ascii_prefix(std::string_view bytes) {
  size_t i = 0;
  while (i < bytes.size() && static_cast<unsigned char>(bytes[i]) < 0x80) ++i;
  return i;
}

// Length of the well-formed sequence at bytes[pos], or 0 when it is not one.
int sequence_length(std::string_view bytes, size_t pos) {
  utf8proc_int32_t c;
  const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(bytes.data() + pos),
                                  static_cast<utf8proc_ssize_t>(bytes.size() - pos), &c);
  return n > 0 ? static_cast<int>(n) : 0;
}

}  // namespace

bool is_valid_utf8(std::string_view bytes) {
  size_t pos = 0;
  while (pos < bytes.size()) {
    if (static_cast<unsigned char>(bytes[pos]) < 0x80) {
      ++pos;
      continue;
    }
    const int n = sequence_length(bytes, pos);
    if (n == 0) return false;
    pos += n;
  }
  return true;
}

std::string decode_utf8_lossy(std::string_view bytes, int64_t* replaced) {
  if (ascii_prefix(bytes) == bytes.size() || is_valid_utf8(bytes)) return std::string(bytes);
  std::string out;
  out.reserve(bytes.size() + 16);
  size_t pos = 0;
  while (pos < bytes.size()) {
    if (static_cast<unsigned char>(bytes[pos]) < 0x80) {
      out.push_back(bytes[pos++]);
      continue;
    }
    const int n = sequence_length(bytes, pos);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      if (replaced) ++*replaced;
      ++pos;
    } else {
      out.append(bytes.substr(pos, n));
      pos += n;
    }
  }
  return out;
}

void ascii_lowercase(std::string& text) {
  for (char& ch : text) {
    if (ch >= 'A' && ch <= 'Z') ch = static_cast<char>(ch - 'A' + 'a');
  }
}

int utf8_decode(std::string_view text, size_t pos, char32_t* code_point) {
  utf8proc_int32_t c;
  const auto n = utf8proc_iterate(reinterpret_cast<const utf8proc_uint8_t*>(text.data() + pos),
                                  static_cast<utf8proc_ssize_t>(text.size() - pos), &c);
  if (n <= 0) {  // not valid UTF-8: one byte, reported as itself
    *code_point = static_cast<unsigned char>(text[pos]);
    return 1;
  }
  *code_point = static_cast<char32_t>(c);
  return static_cast<int>(n);
}

void utf8_append(std::string& out, char32_t code_point) {
  utf8proc_uint8_t buffer[4];
  const auto n = utf8proc_encode_char(static_cast<utf8proc_int32_t>(code_point), buffer);
  out.append(reinterpret_cast<const char*>(buffer), static_cast<size_t>(n));
}

}  // namespace fp8kit::text
