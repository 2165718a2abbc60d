// Device twins of numerics/scale.cpp's scale math, with the same float operations (bit-identical):
// shared by the delayed-scaling update and current scaling.
#pragma once

#include <cuda_runtime.h>

#include <cfloat>

namespace fp8kit::cuda {

// numerics/scale.cpp's usable_amax: > 0 and finite.
__device__ __forceinline__ bool usable_amax(float amax) { return amax > 0.0f && isfinite(amax); }

// numerics/scale.cpp's scale_from_amax for a usable amax: (fp8_max / amax) / 2^margin, FLT_MAX when
// that overflows, optionally rounded down to a power of two.
__device__ __forceinline__ float scale_from_amax(float amax, float fp8_max, int margin, bool power_of_two) {
  float scale = __fdiv_rn(fp8_max, amax);
  if (margin != 0) scale = __fdiv_rn(scale, ldexpf(1.0f, margin));  // (/ 2^0 changes no bit: skipped)
  if (isinf(scale)) scale = FLT_MAX;
  if (power_of_two) scale = __uint_as_float(__float_as_uint(scale) & 0xFF800000u);
  return scale;
}

// numerics/scale.cpp's current_scale: scale_from_amax of a usable amax, else 1.
__device__ __forceinline__ float current_scale(float amax, float fp8_max, int margin, bool power_of_two) {
  return usable_amax(amax) ? scale_from_amax(amax, fp8_max, margin, power_of_two) : 1.0f;
}

}  // namespace fp8kit::cuda
