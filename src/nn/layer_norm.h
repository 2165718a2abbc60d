// LayerNorm layer over the last axis (epsilon 1e-5 in the seed), float32 statistics; the output is
// rounded to bf16 under mixed precision as Keras casts it back to the compute dtype.
#pragma once

#include "nn/parameter.h"
#include "tensor/tensor.h"

#include <cstdint>
#include <span>
#include <string>

namespace fp8kit::nn {

class LayerNorm {
 public:
  LayerNorm(std::string path, int64_t dim, float epsilon = 1e-5f);

  // x: [rows, dim], valid and unchanged until backward. Returns [rows, dim].
  std::span<const float> forward(std::span<const float> x, int64_t rows, bool bf16);
  // Overwrites gamma.grad and beta.grad; returns dx.
  std::span<const float> backward(std::span<const float> dout);

  Parameter gamma, beta;  // [dim], initialised to 1 and 0

 private:
  int64_t dim_;
  float epsilon_;
  const float* x_ = nullptr;
  int64_t rows_ = 0;
  Tensor out_, dx_, mean_, rstd_;
};

}  // namespace fp8kit::nn
