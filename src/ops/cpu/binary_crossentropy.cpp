// Sigmoid, clipped binary cross-entropy, and its gradient through the clip and the sigmoid.
#include "ops/cpu/binary_crossentropy.h"

#include "base/error.h"
#include "numerics/cast.h"
#include "ops/binary_crossentropy.h"

#include <cmath>

namespace fp8kit::ops::cpu {

namespace {

constexpr float kLow = kBceEpsilon, kHigh = 1.0f - kBceEpsilon;

void check(std::span<const float> p, std::span<const float> labels) {
  FP8KIT_CHECK(p.size() == labels.size(), "{} probabilities but {} labels", p.size(), labels.size());
  FP8KIT_CHECK(!p.empty(), "binary cross-entropy of an empty batch");
}

}  // namespace

void sigmoid(std::span<const float> z, bool bf16, std::span<float> p) {
  FP8KIT_CHECK(z.size() == p.size(), "sigmoid: {} inputs, {} outputs", z.size(), p.size());
  for (size_t i = 0; i < z.size(); ++i) {
    const float s = 1.0f / (1.0f + std::exp(-z[i]));
    p[i] = bf16 ? round_bf16(s) : s;
  }
}

float binary_crossentropy(std::span<const float> p, std::span<const float> labels) {
  check(p, labels);
  float sum = 0.0f;
  for (size_t i = 0; i < p.size(); ++i) {
    const float pc = std::fmin(std::fmax(p[i], kLow), kHigh);
    const float y = labels[i];
    sum += -(y * std::log(pc) + (1.0f - y) * std::log(1.0f - pc));
  }
  return sum / static_cast<float>(p.size());
}

void binary_crossentropy_sigmoid_backward(std::span<const float> p, std::span<const float> labels,
                                          std::span<float> dz) {
  check(p, labels);
  FP8KIT_CHECK(dz.size() == p.size(), "{} probabilities but room for {} gradients", p.size(), dz.size());
  const float inv_batch = 1.0f / static_cast<float>(p.size());
  for (size_t i = 0; i < p.size(); ++i) {
    const float pi = p[i], y = labels[i];
    const float through_clip = (pi > kLow && pi < kHigh) ? 1.0f : (pi == kLow || pi == kHigh) ? 0.5f : 0.0f;
    const float pc = std::fmin(std::fmax(pi, kLow), kHigh);
    const float dpc = -(y / pc - (1.0f - y) / (1.0f - pc)) * inv_batch;
    dz[i] = dpc * through_clip * pi * (1.0f - pi);
  }
}

}  // namespace fp8kit::ops::cpu
