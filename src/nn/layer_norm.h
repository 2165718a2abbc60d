// LayerNorm layer over the last axis (epsilon 1e-5 in the seed), float32 statistics; the output is
// rounded to bf16 under mixed precision as Keras casts it back to the compute dtype.
#pragma once

#include "nn/parameter.h"
#include "ops/context.h"

#include <string>

namespace fp8kit::nn {

class LayerNorm {
 public:
  LayerNorm(ParameterSet& parameters, const std::string& path, int64_t dim, float epsilon = 1e-5f);

  // x: [rows, dim], unchanged until backward. Returns [rows, dim].
  const Tensor& forward(ops::Context& c, const Tensor& x, bool bf16);
  // The output gradient is dy, or dy + dy2 (a residual's two branches, summed as read). Returns dx;
  // gamma's and beta's gradients are overwritten on Lane::Side (joined by the step's end).
  const Tensor& backward(ops::Context& c, const Tensor& dy, const Tensor* dy2 = nullptr);
  // The same with dx = residual + it into `out` (a pre-norm block's residual stream, in the same pass).
  void backward(ops::Context& c, const Tensor& dy, const Tensor& residual, Tensor& out);

  Parameter& gamma;  // [dim], initialised to 1
  Parameter& beta;   // [dim], 0

 private:
  // gamma's and beta's gradients, queued on Lane::Side.
  void params_backward(ops::Context& c, const Tensor& dy, const Tensor* dy2);

  float epsilon_;
  const Tensor* x_ = nullptr;
  Tensor out_, dx_, mean_, rstd_;
};

}  // namespace fp8kit::nn
