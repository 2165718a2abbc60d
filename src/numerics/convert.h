// Bulk conversions over arrays: quantize with a scale and compute amax in one pass, dequantize,
// bf16 rounding. Vectorised (AVX-512/AVX2, portable fallback) and multi-threaded for large arrays;
// results are bit-identical to the scalar casts in cast.h whatever the path.
#pragma once

#include "numerics/format.h"

#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace fp8kit {

// out[i] = fp8(x[i] * scale), saturating (quantization paths clamp, see spec). Returns amax of the
// *unscaled* x: max |x[i]|, NaN ignored, inf counted. out.size() must equal x.size().
// scale must be finite and > 0.
float quantize_fp8(std::span<const float> x, float scale, Fp8Format format, std::span<uint8_t> out);
// Same from bf16 input (raw 16-bit patterns).
float quantize_fp8(std::span<const uint16_t> x, float scale, Fp8Format format, std::span<uint8_t> out);

// Keras's form: out[i] = fp8(x[i] / multiplier), saturating; returns amax like quantize_fp8.
// x / m and x * (1 / m) can differ in the last bit, so Keras-faithful quantization divides.
// multiplier must be finite and > 0.
float quantize_fp8_divide(std::span<const float> x, float multiplier, Fp8Format format, std::span<uint8_t> out);

// out[i] = float(q[i]) * scale_inv.
void dequantize_fp8(std::span<const uint8_t> q, Fp8Format format, float scale_inv, std::span<float> out);

// max |x[i]|, NaN ignored, inf counted; 0 for an empty span.
float amax(std::span<const float> x);

// out[i] = x[i] rounded to the nearest bf16, kept as float32 (in-place allowed: out == x).
void round_bf16(std::span<const float> x, std::span<float> out);
void float_to_bf16(std::span<const float> x, std::span<uint16_t> out);
void bf16_to_float(std::span<const uint16_t> x, std::span<float> out);

// Which implementation quantize_fp8 and amax use. Auto (the default) picks the widest the CPU runs;
// tests and benchmarks force each one to compare them. Arrays of at least kParallelMinElements are
// split across the OpenMP threads (omp_set_num_threads(1) keeps everything on one thread).
enum class SimdPath { Auto, Portable, Avx2, Avx512 };
inline constexpr size_t kParallelMinElements = size_t{1} << 17;

std::vector<SimdPath> supported_simd_paths();  // Portable first, then what this CPU runs
void set_simd_path(SimdPath path);             // throws when the CPU cannot run `path`
SimdPath active_simd_path();                   // the path in use (never Auto)
std::string_view name(SimdPath path);          // "auto", "portable", "avx2", "avx512"

}  // namespace fp8kit
