// fill_normal on either device: ops/normal_value.h's generator, on the CPU threaded over elements,
// on the GPU the kernel of ops/cuda/init.h.
#include "ops/init.h"

#include "base/error.h"
#include "numerics/cast.h"
#include "ops/normal_value.h"
#include "ops/tensor_checks.h"

#include <cmath>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/context.h"
#include "ops/cuda/init.h"
#endif

namespace fp8kit::ops {

namespace normal {  // the host's operations of normal_value.h, each rounded on its own

float add(float a, float b) { return a + b; }
float sub(float a, float b) { return a - b; }
float mul(float a, float b) { return a * b; }
float div(float a, float b) { return a / b; }
float sqrt(float a) { return std::sqrt(a); }

}  // namespace normal

void fill_normal(Context& c, Tensor& t, float stddev, uint64_t seed) {
  constexpr std::string_view op = "fill_normal";
  FP8KIT_CHECK(t.dtype() == DType::F32 || t.dtype() == DType::Bf16, "{}: t must be f32 or bf16, got {}", op,
               name(t.dtype()));
  check_tensor(c, t, t.shape(), t.dtype(), op, "t");
  FP8KIT_CHECK(std::isfinite(stddev) && stddev >= 0, "{}: stddev must be finite and >= 0, got {}", op, stddev);
  const int64_t n = t.numel();
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    cuda::fill_normal(n, t.device_data<std::byte>(), t.dtype(), stddev, seed, stream(c));
#endif
    return;
  }
  if (t.dtype() == DType::F32) {
    float* out = t.data<float>();
#pragma omp parallel for schedule(static) if (n >= 65536)
    for (int64_t i = 0; i < n; ++i) out[i] = normal::value(seed, static_cast<uint64_t>(i)) * stddev;
  } else {
    uint16_t* out = t.data<uint16_t>();
#pragma omp parallel for schedule(static) if (n >= 65536)
    for (int64_t i = 0; i < n; ++i) out[i] = float_to_bf16(normal::value(seed, static_cast<uint64_t>(i)) * stddev);
  }
}

}  // namespace fp8kit::ops
