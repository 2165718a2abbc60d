// SwiGLU forward/backward on the CPU, element by element, threaded over large arrays.
#include "ops/cpu/swiglu.h"

#include "numerics/cast.h"

#include <cmath>

namespace fp8kit::ops::cpu {

void swiglu_forward(int64_t n, const float* gate, const float* up, bool bf16, float* out) {
#pragma omp parallel for schedule(static) if (n >= 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float y = swiglu_value(gate[i], up[i]);
    out[i] = bf16 ? round_bf16(y) : y;
  }
}

void swiglu_bf16(int64_t rows, int64_t ffn, const uint16_t* gate_up, uint16_t* out) {
#pragma omp parallel for schedule(static) if (rows * ffn >= 65536)
  for (int64_t r = 0; r < rows; ++r) {
    const uint16_t* gate = gate_up + r * 2 * ffn;
    const uint16_t* up = gate + ffn;
    for (int64_t i = 0; i < ffn; ++i)
      out[r * ffn + i] = float_to_bf16(swiglu_value(bf16_to_float(gate[i]), bf16_to_float(up[i])));
  }
}

void swiglu_backward(int64_t n, const float* gate, const float* up, const float* dout, float* dgate, float* dup) {
#pragma omp parallel for schedule(static) if (n >= 65536)
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i], u = up[i], d = dout[i];
    const float denominator = 1.0f + std::exp(-g);
    const float sig = 1.0f / denominator, silu = g / denominator;
    dgate[i] = d * u * (sig * (1.0f + g * (1.0f - sig)));
    dup[i] = d * silu;
  }
}

}  // namespace fp8kit::ops::cpu
