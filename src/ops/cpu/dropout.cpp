// Dropout forward/backward over whole tensors with the counter-based masks of ops/dropout.h.
#include "ops/dropout.h"

#include "base/error.h"
#include "ops/context.h"
#include "numerics/cast.h"

namespace fp8kit::ops {

std::optional<DropoutMask> dropout_mask(const Context& c, const DropoutSpec& d) {
  if (!d.active || d.rate <= 0.0f) return std::nullopt;
  return DropoutMask(c.seed(), c.step(), d.site, d.rate);
}

float dropout_keep_prob(float rate, bool bf16) {
  const float keep = 1.0f - rate;
  return bf16 ? round_bf16(keep) : keep;
}

void dropout_forward(const DropoutMask& mask, float rate, bool bf16, std::span<const float> x, std::span<float> out) {
  FP8KIT_CHECK(x.size() == out.size(), "dropout: input has {} elements, output {}", x.size(), out.size());
  FP8KIT_CHECK(x.size() <= UINT32_MAX, "dropout: tensors are limited to 2^32 elements, got {}", x.size());
  const float keep = dropout_keep_prob(rate, bf16);
  const int64_t n = static_cast<int64_t>(x.size());
  const float* in = x.data();
  float* o = out.data();
  if (bf16) {
#pragma omp parallel for schedule(static) if (n >= 65536)
    for (int64_t i = 0; i < n; ++i) o[i] = mask.apply(round_bf16(in[i] / keep), static_cast<uint32_t>(i));
  } else {
#pragma omp parallel for schedule(static) if (n >= 65536)
    for (int64_t i = 0; i < n; ++i) o[i] = mask.apply(in[i] / keep, static_cast<uint32_t>(i));
  }
}

void dropout_backward(const DropoutMask& mask, float rate, bool bf16, std::span<const float> dy, std::span<float> dx) {
  FP8KIT_CHECK(dy.size() == dx.size(), "dropout: gradient has {} elements, output {}", dy.size(), dx.size());
  const float keep = dropout_keep_prob(rate, bf16);
  const int64_t n = static_cast<int64_t>(dy.size());
  const float* g = dy.data();
  float* o = dx.data();
#pragma omp parallel for schedule(static) if (n >= 65536)
  for (int64_t i = 0; i < n; ++i) o[i] = mask.apply(g[i] / keep, static_cast<uint32_t>(i));
}

}  // namespace fp8kit::ops
