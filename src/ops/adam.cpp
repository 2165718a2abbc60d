// Tensor-level Adam step: argument checks, then the CPU update (ops/cpu/adam.cpp) or the one-launch
// CUDA kernel (ops/cuda/adam.h) on the context's lane.
#include "ops/adam.h"

#include "base/error.h"
#include "ops/context.h"
#include "ops/tensor_checks.h"
#include "tensor/tensor.h"

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/adam.h"
#include "ops/cuda/context.h"
#endif

namespace fp8kit::ops {

void adam_step(Context& c, const AdamOptions& options, Tensor& iterations, Tensor& w, const Tensor& g, Tensor& m,
               Tensor& v, bool advance_step, int64_t decayed_end) {
  constexpr std::string_view op = "adam_step";
  check_adam_options(options);
  check_tensor(c, iterations, {1}, DType::F32, op, "iterations");
  check_tensor(c, w, w.shape(), DType::F32, op, "w");
  check_tensor(c, g, w.shape(), DType::F32, op, "g (w's shape)");
  check_tensor(c, m, w.shape(), DType::F32, op, "m (w's shape)");
  check_tensor(c, v, w.shape(), DType::F32, op, "v (w's shape)");
  const int64_t n = w.numel(), decayed = decayed_end < 0 ? n : decayed_end;
  FP8KIT_CHECK(decayed <= n, "adam_step: decayed_end {} is past w's {} elements", decayed_end, n);
  if (!c.is_cuda()) {
    float& count = iterations.data<float>()[0];
    const float t = count + 1.0f;
    AdamCoefficients k = adam_coefficients(options, t);
    adam_update(k, w.data<float>(), g.data<float>(), m.data<float>(), v.data<float>(), decayed);
    k.decay = 1.0f;
    adam_update(k, w.data<float>() + decayed, g.data<float>() + decayed, m.data<float>() + decayed,
                v.data<float>() + decayed, n - decayed);
    count = t;
    if (advance_step) c.advance_step();
    return;
  }
#if FP8KIT_HAVE_CUDA
  cuda::adam_step(options, iterations.device_data<float>(), w.device_data<float>(), g.device_data<float>(),
                  m.device_data<float>(), v.device_data<float>(), n, decayed, stream(c),
                  advance_step ? mutable_device_step(c) : nullptr);
  if (advance_step) c.count_steps(1);
#endif
}

}  // namespace fp8kit::ops
