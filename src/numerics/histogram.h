// The histogram of magnitudes that calibration records for percentile clipping: 16 bins per octave
// from 2^-32 to 2^32, a bin read off a float's bits (exponent and top 4 mantissa bits), so the CPU and
// the GPU count the same way and histograms of any number of batches add up.
#pragma once

#include "base/host_device.h"

#include <bit>
#include <cstdint>
#include <limits>

namespace fp8kit {

inline constexpr int kHistogramBins = 1024;
inline constexpr uint32_t kHistogramFirstBits = static_cast<uint32_t>(127 - 32) << 4;  // 2^-32's >> 19

// The bin of a magnitude m >= 0 (bin 0 also holds 0 and everything below 2^-32, bin 1023 everything
// from 2^32 on, inf included). NaN has no bin: the caller skips it.
FP8KIT_HOST_DEVICE inline int histogram_bin(float magnitude) {
#if defined(__CUDA_ARCH__)
  const uint32_t bits = static_cast<uint32_t>(__float_as_uint(magnitude)) >> 19;
#else
  const uint32_t bits = std::bit_cast<uint32_t>(magnitude) >> 19;
#endif
  if (bits < kHistogramFirstBits) return 0;
  const uint32_t bin = bits - kHistogramFirstBits;
  return bin >= static_cast<uint32_t>(kHistogramBins) ? kHistogramBins - 1 : static_cast<int>(bin);
}

// The smallest magnitude of the bin after `bin` (every value counted in `bin` lies below it; bin 1023:
// +inf).
inline float histogram_bin_upper(int bin) {
  if (bin >= kHistogramBins - 1) return std::numeric_limits<float>::infinity();
  return std::bit_cast<float>((kHistogramFirstBits + static_cast<uint32_t>(bin) + 1) << 19);
}

}  // namespace fp8kit
