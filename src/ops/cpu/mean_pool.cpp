// Mean pooling over the sequence axis and its gradient, threaded over the batch.
#include "ops/cpu/mean_pool.h"

#include "base/error.h"
#include "numerics/cast.h"

namespace fp8kit::ops::cpu {

void mean_pool_forward(std::span<const float> x, int64_t batch, int64_t seq, int64_t dim, bool bf16,
                       std::span<float> out) {
  FP8KIT_CHECK(static_cast<int64_t>(x.size()) == batch * seq * dim && static_cast<int64_t>(out.size()) == batch * dim,
               "mean_pool: sizes {} and {} do not match [{}, {}, {}]", x.size(), out.size(), batch, seq, dim);
#pragma omp parallel for schedule(static) if (batch * seq * dim >= 65536)
  for (int64_t b = 0; b < batch; ++b) {
    float* o = out.data() + b * dim;
    for (int64_t d = 0; d < dim; ++d) o[d] = 0.0f;
    for (int64_t t = 0; t < seq; ++t) {
      const float* xr = x.data() + (b * seq + t) * dim;
      for (int64_t d = 0; d < dim; ++d) o[d] += xr[d];
    }
    for (int64_t d = 0; d < dim; ++d) {
      const float m = o[d] / static_cast<float>(seq);
      o[d] = bf16 ? round_bf16(m) : m;
    }
  }
}

void mean_pool_backward(std::span<const float> dout, int64_t batch, int64_t seq, int64_t dim, std::span<float> dx) {
  FP8KIT_CHECK(static_cast<int64_t>(dx.size()) == batch * seq * dim && static_cast<int64_t>(dout.size()) == batch * dim,
               "mean_pool: gradient sizes {} and {} do not match [{}, {}, {}]", dout.size(), dx.size(), batch, seq,
               dim);
  const float inv = 1.0f / static_cast<float>(seq);
#pragma omp parallel for schedule(static) if (batch * seq * dim >= 65536)
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < seq; ++t)
      for (int64_t d = 0; d < dim; ++d) dx[(b * seq + t) * dim + d] = dout[b * dim + d] * inv;
}

}  // namespace fp8kit::ops::cpu
