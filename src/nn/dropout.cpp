// Dropout layer: buffers and the mask of the last forward.
#include "nn/dropout.h"

namespace fp8kit::nn {

std::span<const float> Dropout::forward(std::span<const float> x, bool training, uint64_t seed, uint64_t step,
                                        bool bf16) {
  if (!training || rate_ == 0.0f) {
    mask_.reset();
    return x;
  }
  mask_.emplace(seed, step, site_, rate_);
  bf16_ = bf16;
  out_.resize({static_cast<int64_t>(x.size())});
  ops::dropout_forward(*mask_, rate_, bf16, x, out_.span<float>());
  return out_.span<float>();
}

std::span<const float> Dropout::backward(std::span<const float> dout) {
  if (!mask_) return dout;
  dx_.resize({static_cast<int64_t>(dout.size())});
  ops::dropout_backward(*mask_, rate_, bf16_, dout, dx_.span<float>());
  return dx_.span<float>();
}

}  // namespace fp8kit::nn
