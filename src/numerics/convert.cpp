// Bulk conversions: input checks, run-time choice of the SIMD path, and splitting large arrays across
// OpenMP threads. The per-path kernels are in convert_{portable,avx2,avx512}.cpp.
#include "numerics/convert.h"

#include "base/error.h"
#include "numerics/cast.h"
#include "numerics/convert_kernels.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <string>

namespace fp8kit {
namespace {

using detail::ConvertKernels;
using detail::ScaleOp;

bool cpu_runs(SimdPath path) {
  switch (path) {
    case SimdPath::Auto:
    case SimdPath::Portable:
      return true;
    case SimdPath::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case SimdPath::Avx512:
      return __builtin_cpu_supports("avx512f");
  }
  return false;
}

SimdPath widest_path() {
  if (cpu_runs(SimdPath::Avx512)) return SimdPath::Avx512;
  if (cpu_runs(SimdPath::Avx2)) return SimdPath::Avx2;
  return SimdPath::Portable;
}

std::atomic<SimdPath>& chosen_path() {
  static std::atomic<SimdPath> path{widest_path()};
  return path;
}

const ConvertKernels& kernels() {
  switch (chosen_path().load(std::memory_order_relaxed)) {
    case SimdPath::Avx512:
      return detail::kAvx512Kernels;
    case SimdPath::Avx2:
      return detail::kAvx2Kernels;
    default:
      return detail::kPortableKernels;
  }
}

// Elements per parallel task: large enough to amortise scheduling, small enough to balance.
constexpr size_t kChunk = size_t{1} << 15;

bool run_parallel(size_t n) { return n >= kParallelMinElements && omp_get_max_threads() > 1 && !omp_in_parallel(); }

// Runs body(begin, end) over [0, n) in chunks, across threads for large n; returns the max of the
// chunk results (amaxes, all >= 0).
template <typename Body>
float chunked_max(size_t n, Body body) {
  if (!run_parallel(n)) return body(size_t{0}, n);
  const auto chunks = static_cast<int64_t>((n + kChunk - 1) / kChunk);
  float result = 0.0f;
#pragma omp parallel for schedule(static) reduction(max : result)
  for (int64_t c = 0; c < chunks; ++c) {
    const size_t begin = static_cast<size_t>(c) * kChunk;
    result = std::max(result, body(begin, std::min(n, begin + kChunk)));
  }
  return result;
}

template <typename Body>
void chunked(size_t n, Body body) {
  chunked_max(n, [&](size_t begin, size_t end) {
    body(begin, end);
    return 0.0f;
  });
}

void check_scale(float scale, const char* what) {
  FP8KIT_CHECK(std::isfinite(scale) && scale > 0.0f, "FP8 quantization {} must be finite and > 0, got {}", what, scale);
}

void check_sizes(size_t in, size_t out) {
  FP8KIT_CHECK(in == out, "conversion output has {} elements but the input has {}: give both the same size", out, in);
}

float quantize_f32(std::span<const float> x, float scale, ScaleOp op, Fp8Format format, std::span<uint8_t> out) {
  check_sizes(x.size(), out.size());
  const ConvertKernels& k = kernels();
  return chunked_max(x.size(), [&](size_t begin, size_t end) {
    return k.quantize_f32(x.data() + begin, end - begin, scale, op, format, out.data() + begin);
  });
}

}  // namespace

float quantize_fp8(std::span<const float> x, float scale, Fp8Format format, std::span<uint8_t> out) {
  check_scale(scale, "scale");
  return quantize_f32(x, scale, ScaleOp::Multiply, format, out);
}

float quantize_fp8_divide(std::span<const float> x, float multiplier, Fp8Format format, std::span<uint8_t> out) {
  check_scale(multiplier, "multiplier");
  return quantize_f32(x, multiplier, ScaleOp::Divide, format, out);
}

float quantize_fp8(std::span<const uint16_t> x, float scale, Fp8Format format, std::span<uint8_t> out) {
  check_scale(scale, "scale");
  check_sizes(x.size(), out.size());
  const ConvertKernels& k = kernels();
  return chunked_max(x.size(), [&](size_t begin, size_t end) {
    return k.quantize_bf16(x.data() + begin, end - begin, scale, format, out.data() + begin);
  });
}

void dequantize_fp8(std::span<const uint8_t> q, Fp8Format format, float scale_inv, std::span<float> out) {
  check_sizes(q.size(), out.size());
  float table[256];  // every code's value, times scale_inv (one rounding, as decode * scale_inv)
  for (int c = 0; c < 256; ++c) table[c] = decode_fp8(static_cast<uint8_t>(c), format) * scale_inv;
  chunked(q.size(), [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) out[i] = table[q[i]];
  });
}

float amax(std::span<const float> x) {
  const ConvertKernels& k = kernels();
  return chunked_max(x.size(), [&](size_t begin, size_t end) { return k.amax(x.data() + begin, end - begin); });
}

void round_bf16(std::span<const float> x, std::span<float> out) {
  check_sizes(x.size(), out.size());
  chunked(x.size(), [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) out[i] = round_bf16(x[i]);
  });
}

void float_to_bf16(std::span<const float> x, std::span<uint16_t> out) {
  check_sizes(x.size(), out.size());
  chunked(x.size(), [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) out[i] = float_to_bf16(x[i]);
  });
}

void bf16_to_float(std::span<const uint16_t> x, std::span<float> out) {
  check_sizes(x.size(), out.size());
  chunked(x.size(), [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) out[i] = bf16_to_float(x[i]);
  });
}

std::vector<SimdPath> supported_simd_paths() {
  std::vector<SimdPath> paths{SimdPath::Portable};
  for (SimdPath p : {SimdPath::Avx2, SimdPath::Avx512}) {
    if (cpu_runs(p)) paths.push_back(p);
  }
  return paths;
}

void set_simd_path(SimdPath path) {
  FP8KIT_CHECK(cpu_runs(path), "this CPU cannot run the {} conversion path: pick one of supported_simd_paths()", name(path));
  chosen_path().store(path == SimdPath::Auto ? widest_path() : path);
}

SimdPath active_simd_path() { return chosen_path().load(); }

std::string_view name(SimdPath path) {
  switch (path) {
    case SimdPath::Auto:
      return "auto";
    case SimdPath::Portable:
      return "portable";
    case SimdPath::Avx2:
      return "avx2";
    case SimdPath::Avx512:
      return "avx512";
  }
  return "?";
}

}  // namespace fp8kit
