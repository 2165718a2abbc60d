// Adam as Keras 3 applies it (dense updates of every element, float32 state), on either device:
//   m += (g - m) (1 - b1);  v += (g^2 - v) (1 - b2);
//   alpha = lr sqrt(1 - b2^t) / (1 - b1^t);  w -= alpha m / (sqrt(v) + eps),  t = iterations + 1.
// The hyper-parameters are shared by the optimizer (optim::Adam, which names them AdamOptions), the
// CPU core and the GPU kernel (ops/cuda/adam.h), so the kernel knows nothing of optim.
#pragma once

#include <cstdint>

namespace fp8kit {
class Tensor;
}

namespace fp8kit::ops {

class Context;

struct AdamOptions {
  float learning_rate = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-7f;
};

// Throws unless learning_rate >= 0 and both betas are in [0, 1).
void check_adam_options(const AdamOptions& options);

// One step's float32 constants at iteration t (iterations + 1).
struct AdamCoefficients {
  float one_minus_b1, one_minus_b2, alpha, epsilon;
};
AdamCoefficients adam_coefficients(const AdamOptions& options, float t);

// The CPU update of n elements, w, m and v in place: the formula above, one float32 rounding per
// operation in the order written (the AVX2 lanes and the scalar tail alike).
void adam_update(const AdamCoefficients& coefficients, float* w, const float* g, float* m, float* v, int64_t n);

// One step over flat f32 tensors of one shape on the context's device (e.g. every parameter of a model
// as one buffer, so the GPU updates them all in one launch): iterations is [1] f32 (exact up to 2^24
// steps), read for t and set to t by the op, in device memory on the GPU (a captured step replays with
// the current count). The CPU gives optim::Adam's bits; the GPU rounds every operation where the CPU
// compiler may fuse a multiply-add in the scalar tail, so they agree to ~1e-7 relative.
// advance_step: the context's step (the dropout masks') moves on with the update, in the same launch
// on the GPU (a training step's end).
void adam_step(Context& c, const AdamOptions& options, Tensor& iterations, Tensor& w, const Tensor& g, Tensor& m,
               Tensor& v, bool advance_step = false);

}  // namespace fp8kit::ops
