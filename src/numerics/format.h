// The FP8 formats (OCP E4M3 "fn" and E5M2) and their constants, plus BF16/FP16 for comparison tables.
#pragma once

#include <cstdint>
#include <string_view>

namespace fp8kit {

enum class Fp8Format : uint8_t { E4M3, E5M2 };

// What happens to finite values beyond the largest finite FP8 value (and to +-inf).
enum class Overflow : uint8_t {
  Saturate,       // clamp to +-max finite (TE cast kernels, CUDA __NV_SATFINITE); inf -> +-max
  NonSaturating,  // ml_dtypes / PyTorch <= 2.11: E4M3 -> NaN, E5M2 -> +-inf
};

struct FormatInfo {
  std::string_view name;
  int exponent_bits;
  int mantissa_bits;
  int bias;
  float max_finite;     // 448 (E4M3), 57344 (E5M2)
  float min_normal;     // 2^-6, 2^-14
  float min_subnormal;  // 2^-9, 2^-16
  uint8_t max_code;     // code of +max_finite: 0x7E, 0x7B
  uint8_t nan_code;     // the NaN a cast produces (sign bit clear): 0x7F, 0x7E (ml_dtypes' quiet NaN)
  bool has_infinity;    // E5M2 only: 0x7C / 0xFC
};

inline constexpr FormatInfo kE4M3{"e4m3", 4, 3, 7, 448.0f, 0x1p-6f, 0x1p-9f, 0x7E, 0x7F, false};
inline constexpr FormatInfo kE5M2{"e5m2", 5, 2, 15, 57344.0f, 0x1p-14f, 0x1p-16f, 0x7B, 0x7E, true};

constexpr const FormatInfo& info(Fp8Format format) {
  return format == Fp8Format::E4M3 ? kE4M3 : kE5M2;
}
constexpr float fp8_max(Fp8Format format) { return info(format).max_finite; }
constexpr std::string_view name(Fp8Format format) { return info(format).name; }

// Parses "e4m3" / "e5m2" (case-insensitive); throws fp8kit::Error naming the accepted values.
Fp8Format parse_format(std::string_view text);

}  // namespace fp8kit
