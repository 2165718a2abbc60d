// Bulk conversions over arrays: quantize with a scale and compute amax in one pass, dequantize,
// bf16 rounding. Vectorised (AVX-512/AVX2, portable fallback) and multi-threaded for large arrays;
// results are bit-identical to the scalar casts in cast.h whatever the path.
#pragma once

#include "numerics/format.h"

#include <cstdint>
#include <span>

namespace fp8kit {

// out[i] = fp8(x[i] * scale), saturating (quantization paths clamp, see spec). Returns amax of the
// *unscaled* x: max |x[i]|, NaN ignored, inf counted. out.size() must equal x.size().
float quantize_fp8(std::span<const float> x, float scale, Fp8Format format, std::span<uint8_t> out);
// Same from bf16 input (raw 16-bit patterns).
float quantize_fp8(std::span<const uint16_t> x, float scale, Fp8Format format, std::span<uint8_t> out);

// out[i] = float(q[i]) * scale_inv.
void dequantize_fp8(std::span<const uint8_t> q, Fp8Format format, float scale_inv, std::span<float> out);

// max |x[i]|, NaN ignored, inf counted; 0 for an empty span.
float amax(std::span<const float> x);

// out[i] = x[i] rounded to the nearest bf16, kept as float32 (in-place allowed: out == x).
void round_bf16(std::span<const float> x, std::span<float> out);
void float_to_bf16(std::span<const float> x, std::span<uint16_t> out);
void bf16_to_float(std::span<const uint16_t> x, std::span<float> out);

}  // namespace fp8kit
