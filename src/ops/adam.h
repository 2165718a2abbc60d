// Adam as Keras 3 applies it (dense updates of every element, float32 state), on either device, with
// PyTorch AdamW's decoupled weight decay and a learning-rate schedule:
//   lr_t = scheduled_learning_rate(options, t), t = iterations + 1;  w *= 1 - lr_t weight_decay;
//   m += (g - m) (1 - b1);  v += (g^2 - v) (1 - b2);
//   alpha = lr_t sqrt(1 - b2^t) / (1 - b1^t);  w -= alpha m / (sqrt(v) + eps).
// Without weight decay and schedule (the defaults) this is Keras's Adam, bit for bit as before.
// The hyper-parameters are shared by the optimizer (optim::Adam, which names them AdamOptions), the
// CPU core and the GPU kernel (ops/cuda/adam.h), so the kernel knows nothing of optim.
#pragma once

#include "base/host_device.h"

#include <cmath>
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
  // Decoupled (AdamW) weight decay: w *= 1 - lr_t weight_decay before the Adam update, as PyTorch's
  // AdamW does (on every element the update covers: a model keeps its norms' and biases' apart by
  // giving them an optimizer of their own).
  float weight_decay = 0.0f;
  // The schedule of lr_t = learning_rate f(t): linear warmup f = t / warmup_steps for
  // t <= warmup_steps, then a cosine from 1 (at warmup_steps) to min_lr_ratio (at decay_steps), then
  // min_lr_ratio; decay_steps 0: f = 1 after the warmup.
  int64_t warmup_steps = 0;
  int64_t decay_steps = 0;
  float min_lr_ratio = 0.1f;
};

// Throws unless learning_rate >= 0, both betas are in [0, 1), weight_decay >= 0, warmup_steps >= 0,
// decay_steps is 0 or > warmup_steps, and min_lr_ratio is in [0, 1].
void check_adam_options(const AdamOptions& options);

// lr_t of step t (1 for the first update), in double. Shared by the CPU and the GPU kernel, which
// evaluates it from the device's iteration count (a captured step replays with the right rate).
FP8KIT_HOST_DEVICE inline double scheduled_learning_rate(const AdamOptions& options, double t) {
  const double warmup = static_cast<double>(options.warmup_steps), decay = static_cast<double>(options.decay_steps);
  double f = 1.0;
  if (options.warmup_steps > 0 && t <= warmup) {
    f = t / warmup;
  } else if (options.decay_steps > 0) {
    const double min_ratio = options.min_lr_ratio;
    if (t >= decay) {
      f = min_ratio;
    } else {
      const double progress = (t - warmup) / (decay - warmup);
      f = min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
    }
  }
  return static_cast<double>(options.learning_rate) * f;
}

// One step's float32 constants at iteration t (iterations + 1): decay = 1 - lr_t weight_decay (1 without
// weight decay, which leaves w's bits alone) and Keras's alpha with lr_t.
struct AdamCoefficients {
  float one_minus_b1, one_minus_b2, alpha, epsilon, decay;
};
AdamCoefficients adam_coefficients(const AdamOptions& options, float t);

// The CPU update of n elements, w, m and v in place: the formula above, one float32 rounding per
// operation in the order written (the AVX2 lanes and the scalar tail alike), w's as w decay - step.
void adam_update(const AdamCoefficients& coefficients, float* w, const float* g, float* m, float* v, int64_t n);

// One step over flat f32 tensors of one shape on the context's device (e.g. every parameter of a model
// as one buffer, so the GPU updates them all in one launch): iterations is [1] f32 (exact up to 2^24
// steps), read for t and set to t by the op, in device memory on the GPU (a captured step replays with
// the current count). The CPU gives optim::Adam's bits; the GPU rounds every operation where the CPU
// compiler may fuse a multiply-add in the scalar tail, so they agree to ~1e-7 relative.
// advance_step: the context's step (the dropout masks') moves on with the update, in the same launch
// on the GPU (a training step's end). decayed_end: only the elements before it take the weight decay
// (nn::ParameterSet::decayed_end); -1: all.
void adam_step(Context& c, const AdamOptions& options, Tensor& iterations, Tensor& w, const Tensor& g, Tensor& m,
               Tensor& v, bool advance_step = false, int64_t decayed_end = -1);

}  // namespace fp8kit::ops
