// Adam's hyper-parameters, shared by the optimizer (optim::Adam, which names them AdamOptions) and
// the GPU update kernel (ops/cuda/adam.h), so the kernel knows nothing of optim.
#pragma once

namespace fp8kit::ops {

struct AdamOptions {
  float learning_rate = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-7f;
};

}  // namespace fp8kit::ops
