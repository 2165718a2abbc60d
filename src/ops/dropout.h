// Counter-based dropout masks: whether element i is kept depends only on (seed, step, site, i), so
// a training step's masks are reproducible from (seed, step) alone (exact --resume) and a CUDA
// kernel can compute the same bits. Each element is two rounds of a 32-bit integer hash (the
// "lowbias32" mixer, a bijection) of i under a 64-bit key derived with splitmix64; the top 24 bits
// are a uniform u in [0, 1) and the element is kept when u >= rate (Keras keeps with prob 1 - rate).
#pragma once

#include "base/host_device.h"

#include <bit>
#include <cmath>
#include <cstdint>
#include <optional>
#include <span>

// The two hashes are also compiled for the GPU (ops/cuda/dropout.cu draws the same keep bits).

namespace fp8kit {
class Tensor;
}

namespace fp8kit::ops {

FP8KIT_HOST_DEVICE inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

FP8KIT_HOST_DEVICE inline uint32_t lowbias32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

// The mask of one dropout site (a dropout layer) in one step.
class DropoutMask {
 public:
  DropoutMask(uint64_t seed, uint64_t step, uint32_t site, float rate) {
    const uint64_t key = splitmix64(splitmix64(splitmix64(seed) ^ step) ^ site);
    key0_ = static_cast<uint32_t>(key);
    key1_ = static_cast<uint32_t>(key >> 32);
    threshold_ = static_cast<uint32_t>(std::llround(static_cast<double>(rate) * 16777216.0));
  }
  bool keep(uint32_t index) const { return (lowbias32(lowbias32(index ^ key0_) + key1_) >> 8) >= threshold_; }
  // value where kept, +0 where dropped, as a branch-free bit select (vectorises; NaN/inf drop to 0).
  float apply(float value, uint32_t index) const {
    const uint32_t all = 0u - static_cast<uint32_t>(keep(index));
    return std::bit_cast<float>(std::bit_cast<uint32_t>(value) & all);
  }

 private:
  uint32_t key0_, key1_, threshold_;
};

// A dropout site in a step's ops: element i is kept exactly when DropoutMask(context seed, context
// step, site, rate).keep(i), on either device. Inactive (evaluation, rate 0): the identity.
struct DropoutSpec {
  uint32_t site = 0;
  float rate = 0.0f;
  bool active = false;
};

// The mask of `d` in the step a CPU context is at (std::nullopt when inactive).
class Context;
std::optional<DropoutMask> dropout_mask(const Context& c, const DropoutSpec& d);

// Dropout of a Tensor on the context's device (ops/dropout.cpp): the span functions below on the CPU,
// cuda::dropout_forward/backward (the same bits) on the GPU. x, dy: f32, any shape, fewer than 2^32
// elements, indexed row-major from 0; out, dx: resized to their shape (a default Tensor() becomes one
// on the context's device) and may be x or dy itself. Inactive spec: a copy (none when in place).
void dropout_forward(Context& c, const Tensor& x, bool bf16, const DropoutSpec& spec, Tensor& out);
void dropout_backward(Context& c, const Tensor& dy, bool bf16, const DropoutSpec& spec, Tensor& dx);

// Keras's dropout of a float32 or bf16 tensor: out = keep ? x / keep_prob : 0, where keep_prob is
// 1 - rate in the tensor's dtype (bf16(0.9) = 0.8984375) and the quotient is rounded to bf16 when
// bf16. Elements are indexed from 0 over the whole tensor. out may alias x.
void dropout_forward(const DropoutMask& mask, float rate, bool bf16, std::span<const float> x, std::span<float> out);
// dx = keep ? dy / keep_prob : 0 (float32 gradient math, same keep_prob as the forward).
void dropout_backward(const DropoutMask& mask, float rate, bool bf16, std::span<const float> dy, std::span<float> dx);
// The divisor used above.
float dropout_keep_prob(float rate, bool bf16);

}  // namespace fp8kit::ops
