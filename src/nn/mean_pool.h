// Mean over the sequence axis (Keras GlobalAveragePooling1D without a mask: pads are averaged in): the
// CPU core of ops/mean_pool.h.
#pragma once

#include "ops/cpu/mean_pool.h"

namespace fp8kit::nn {

// x: [batch, seq, dim] -> out: [batch, dim]; float32 sum, divided by seq, rounded to bf16 if bf16.
using ops::cpu::mean_pool_forward;
// dx[b, t, :] = dout[b, :] / seq.
using ops::cpu::mean_pool_backward;

}  // namespace fp8kit::nn
