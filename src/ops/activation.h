// A Linear's activation, and GELU written once for the CPU and the GPU. GELU is the tanh approximation,
// gelu(x) = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), as cuBLASLt's GELU epilogue and Transformer
// Engine's fused GELU compute it (PyTorch's nn.GELU(approximate="tanh")). Every multiply-add is an
// explicit fmaf, so neither compiler contracts differently; tanhf is each device's own (glibc's on the
// CPU, CUDA's on the GPU, both within 2 ulp), so the two devices agree within a few float32 ulp.
#pragma once

#include "base/host_device.h"

#include <cmath>
#include <cstdint>

namespace fp8kit::ops {

enum class Activation : uint8_t { None, Relu, Gelu };

// Which of SwiGLU's two inputs (silu(gate) up) a gradient is of: the gate projection's or up's.
enum class SwiGluPart : uint8_t { None, Gate, Up };

namespace gelu_detail {
inline constexpr float kSqrt2OverPi = 0.7978845608028654f;
inline constexpr float kCubic = 0.044715f;
// sqrt(2/pi) (x + 0.044715 x^3), the argument of tanh.
FP8KIT_HOST_DEVICE inline float inner(float x) { return kSqrt2OverPi * fmaf(kCubic * (x * x), x, x); }
}  // namespace gelu_detail

FP8KIT_HOST_DEVICE inline float gelu(float x) {
  const float h = 0.5f * x;
  return fmaf(h, tanhf(gelu_detail::inner(x)), h);  // x/2 + x/2 tanh(u)
}

// d gelu / dx = (1 + t)/2 + x/2 (1 - t^2) sqrt(2/pi) (1 + 3 0.044715 x^2), t = tanh(u).
FP8KIT_HOST_DEVICE inline float gelu_grad(float x) {
  using namespace gelu_detail;
  const float t = tanhf(inner(x));
  const float du = kSqrt2OverPi * fmaf(3.0f * kCubic, x * x, 1.0f);
  const float sech2 = fmaf(-t, t, 1.0f);
  return fmaf((0.5f * x) * sech2, du, fmaf(0.5f, t, 0.5f));
}

}  // namespace fp8kit::ops
