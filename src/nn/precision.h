// The precision policy of a layer or model: fp32, mixed bf16 (bf16 compute, fp32 master weights),
// or FP8 (E4M3/E5M2 Linears with per-tensor scaling; everything else as mixed bf16).
#pragma once

#include <string_view>

namespace fp8kit::nn {

enum class Precision { Fp32, Bf16, Fp8 };

// Parses "fp32" | "bf16" | "fp8" (case-insensitive; "float32", "bfloat16", "mixed_bfloat16",
// "float8" accepted too); throws fp8kit::Error naming the accepted values.
Precision parse_precision(std::string_view text);
// "fp32", "bf16", "fp8".
std::string_view name(Precision precision);

}  // namespace fp8kit::nn
