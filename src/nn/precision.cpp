// Parsing and naming of precision policies.
#include "nn/precision.h"

#include "base/error.h"

#include <algorithm>
#include <cctype>
#include <string>

namespace fp8kit::nn {

Precision parse_precision(std::string_view text) {
  std::string lower(text);
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  if (lower == "fp32" || lower == "float32") return Precision::Fp32;
  if (lower == "bf16" || lower == "bfloat16" || lower == "mixed_bfloat16") return Precision::Bf16;
  if (lower == "fp8" || lower == "float8") return Precision::Fp8;
  fail("unknown precision '{}': use fp32, bf16 or fp8", text);
}

std::string_view name(Precision precision) {
  switch (precision) {
    case Precision::Fp32: return "fp32";
    case Precision::Bf16: return "bf16";
    case Precision::Fp8: return "fp8";
  }
  return "?";
}

}  // namespace fp8kit::nn
