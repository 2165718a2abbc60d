// LayerNorm forward/backward over rows of a [rows, dim] float32 tensor, threaded over rows.
#include "ops/layer_norm.h"

#include "numerics/cast.h"

#include <omp.h>

#include <cmath>
#include <vector>

namespace fp8kit::ops {

void layer_norm_forward(int64_t rows, int64_t dim, float eps, const float* x, const float* gamma, const float* beta,
                        bool bf16_out, float* out, float* mean, float* rstd) {
#pragma omp parallel for schedule(static) if (rows * dim >= 16384)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    float sum = 0.0f;
    for (int64_t i = 0; i < dim; ++i) sum += xr[i];
    const float mu = sum / static_cast<float>(dim);
    float sq = 0.0f;
    for (int64_t i = 0; i < dim; ++i) sq += (xr[i] - mu) * (xr[i] - mu);
    const float var = sq / static_cast<float>(dim);
    const float rs = 1.0f / std::sqrt(var + eps);
    float* o = out + r * dim;
    for (int64_t i = 0; i < dim; ++i) {
      const float inv = rs * gamma[i];
      const float y = xr[i] * inv + (beta[i] - mu * inv);
      o[i] = bf16_out ? round_bf16(y) : y;
    }
    mean[r] = mu;
    rstd[r] = rs;
  }
}

void layer_norm_backward(int64_t rows, int64_t dim, const float* x, const float* gamma, const float* mean,
                         const float* rstd, const float* dout, float* dx, float* dgamma, float* dbeta) {
  // Per-thread partial sums of dgamma and dbeta, combined in thread order. The scratch belongs to
  // the calling thread (kept between calls): the team uses it through `partials`, not by name.
  thread_local std::vector<float> scratch;
  const int threads = rows * dim >= 16384 ? omp_get_max_threads() : 1;
  scratch.assign(static_cast<size_t>(threads) * 2 * dim, 0.0f);
  float* const partials = scratch.data();
#pragma omp parallel num_threads(threads)
  {
    float* dg = partials + static_cast<size_t>(omp_get_thread_num()) * 2 * dim;
    float* db = dg + dim;
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      const float* xr = x + r * dim;
      const float* g = dout + r * dim;
      const float mu = mean[r], rs = rstd[r];
      float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
      for (int64_t i = 0; i < dim; ++i) {
        const float xhat = (xr[i] - mu) * rs;
        const float dxhat = g[i] * gamma[i];
        sum_dxhat += dxhat;
        sum_dxhat_xhat += dxhat * xhat;
        dg[i] += g[i] * xhat;
        db[i] += g[i];
      }
      const float mean_dxhat = sum_dxhat / static_cast<float>(dim);
      const float mean_dxhat_xhat = sum_dxhat_xhat / static_cast<float>(dim);
      float* d = dx + r * dim;
      for (int64_t i = 0; i < dim; ++i) {
        const float xhat = (xr[i] - mu) * rs;
        d[i] = rs * (g[i] * gamma[i] - mean_dxhat - xhat * mean_dxhat_xhat);
      }
    }
  }
  for (int64_t i = 0; i < dim; ++i) {
    float g = 0.0f, b = 0.0f;
    for (int t = 0; t < threads; ++t) {
      g += partials[static_cast<size_t>(t) * 2 * dim + i];
      b += partials[static_cast<size_t>(t) * 2 * dim + dim + i];
    }
    dgamma[i] = g;
    dbeta[i] = b;
  }
}

}  // namespace fp8kit::ops
