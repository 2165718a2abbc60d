// Parsing of FP8 format names.
#include "numerics/format.h"

#include "base/error.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace fp8kit {

Fp8Format parse_format(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(),
                 [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
  if (lower == "e4m3" || lower == "e4m3fn" || lower == "float8_e4m3fn") return Fp8Format::E4M3;
  if (lower == "e5m2" || lower == "float8_e5m2") return Fp8Format::E5M2;
  fail("unknown FP8 format '{}': use e4m3 or e5m2", text);
}

}  // namespace fp8kit
