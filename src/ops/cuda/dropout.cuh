// The device side of DropoutMask (ops/dropout.h): same key derivation and hash, so the same bits; and
// a dropout site as a kernel argument, for the kernels that fuse dropout with their own work.
#pragma once

#include <cstdint>

#include "ops/cuda/dropout.h"
#include "ops/cuda/round.cuh"
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

// A DropoutSite made ready for a kernel (dropout_args): keep probability and mask threshold worked out
// on the host, the step read on the device. Element i's values are ops::dropout_forward's and
// ops::dropout_backward's.
struct DropoutArgs {
  uint64_t seed = 0;
  const uint64_t* step = nullptr;
  uint32_t site = 0, threshold = 0;
  float keep = 1.0f;
  bool active = false;

  // The step's mask (the step counter read, three splitmix64): kernels that take many elements per
  // thread derive it once and pass it to the calls below.
  __device__ DeviceDropoutMask mask() const { return DeviceDropoutMask(seed, active ? *step : 0, site, threshold); }
  // keep ? x / keep_prob (rounded to bf16 when bf16) : +0; x itself when inactive.
  __device__ float forward(float x, uint32_t i, bool bf16, const DeviceDropoutMask& m) const {
    return active ? m.apply(bf16 ? round_bf16(x / keep) : x / keep, i) : x;
  }
  // keep ? dy / keep_prob : +0 (float32).
  __device__ float backward(float dy, uint32_t i, const DeviceDropoutMask& m) const { return forward(dy, i, false, m); }
  // The same, the mask derived for this element alone.
  __device__ float forward(float x, uint32_t i, bool bf16) const { return active ? forward(x, i, bf16, mask()) : x; }
  __device__ float backward(float dy, uint32_t i) const { return forward(dy, i, false); }
};

// The kernel argument of `site` for a tensor of `elements` (keep_prob as ops::dropout_keep_prob(rate,
// bf16)). Throws, naming `what`, for an active site without the device step counter or over more than
// 2^32 elements (the mask hashes a 32-bit element index).
DropoutArgs dropout_args(const DropoutSite& site, bool bf16, const char* what, int64_t elements);

}  // namespace fp8kit::cuda
