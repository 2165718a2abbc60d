// Mean pooling's CPU core on float32 spans: the exact reference of ops/mean_pool.h's Tensor op, also
// nn's mean pooling (nn/mean_pool.h). Keras GlobalAveragePooling1D without a mask: pads are averaged in.
#pragma once

#include <cstdint>
#include <span>

namespace fp8kit::ops::cpu {

// x: [batch, seq, dim] -> out: [batch, dim]; float32 sum in sequence order, divided by seq, rounded to
// bf16 if bf16.
void mean_pool_forward(std::span<const float> x, int64_t batch, int64_t seq, int64_t dim, bool bf16,
                       std::span<float> out);
// dx[b, t, :] = dout[b, :] / seq.
void mean_pool_backward(std::span<const float> dout, int64_t batch, int64_t seq, int64_t dim, std::span<float> dx);

}  // namespace fp8kit::ops::cpu
