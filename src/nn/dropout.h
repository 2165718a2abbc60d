// Dropout layer (Keras semantics, counter-based masks from ops/dropout.h keyed by (seed, step, site)).
#pragma once

#include "ops/dropout.h"
#include "tensor/tensor.h"

#include <cstdint>
#include <optional>
#include <span>

namespace fp8kit::nn {

class Dropout {
 public:
  // site: this layer's id within the model, so that every dropout layer draws its own mask.
  Dropout(uint32_t site, float rate) : site_(site), rate_(rate) {}

  // training: x with the mask of (seed, step, site) applied; otherwise x itself (no copy).
  std::span<const float> forward(std::span<const float> x, bool training, uint64_t seed, uint64_t step, bool bf16);
  // Gradient of the last forward (dout itself when it did not drop).
  std::span<const float> backward(std::span<const float> dout);

  uint32_t site() const { return site_; }
  float rate() const { return rate_; }

 private:
  uint32_t site_;
  float rate_;
  bool bf16_ = false;
  std::optional<ops::DropoutMask> mask_;  // empty when the last forward did not drop
  Tensor out_, dx_;
};

}  // namespace fp8kit::nn
