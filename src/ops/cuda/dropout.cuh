// The device side of DropoutMask (ops/dropout.h): same key derivation and hash, so the same bits.
#pragma once

#include <cstdint>

#include "ops/dropout.h"

namespace fp8kit::cuda {

struct DeviceDropoutMask {
  uint32_t key0, key1, threshold;

  __device__ DeviceDropoutMask(uint64_t seed, uint64_t step, uint32_t site, uint32_t threshold_) {
    const uint64_t key = ops::splitmix64(ops::splitmix64(ops::splitmix64(seed) ^ step) ^ site);
    key0 = static_cast<uint32_t>(key);
    key1 = static_cast<uint32_t>(key >> 32);
    threshold = threshold_;
  }
  __device__ bool keep(uint32_t index) const {
    return (ops::lowbias32(ops::lowbias32(index ^ key0) + key1) >> 8) >= threshold;
  }
  // value where kept, +0 where dropped (a bit select, as DropoutMask::apply).
  __device__ float apply(float value, uint32_t index) const {
    return __uint_as_float(__float_as_uint(value) & (0u - static_cast<uint32_t>(keep(index))));
  }
};

}  // namespace fp8kit::cuda
