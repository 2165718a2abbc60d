// LayerNorm forward/backward over rows of a [rows, dim] float32 array, threaded over rows.
#include "ops/cpu/layer_norm.h"

#include "numerics/cast.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace fp8kit::ops::cpu {

namespace {

// The output gradient at i of a row: g[i], or g[i] + g2[i] (kTwo), as a template parameter so that
// the inner loops stay branch-free.
template <bool kTwo>
float output_grad(const float* g, const float* g2, int64_t i) {
  if constexpr (kTwo) {
    return g[i] + g2[i];
  } else {
    return g[i];
  }
}

// The backward's multiply-adds are written as std::fma: the bits are then the same whatever the
// compiler contracts (GCC's choice varied between a loop's vector body and its scalar tail, and with
// the loop around it), and they are the GPU kernels' (__fmaf_rn, or nvcc's contraction).
template <bool kTwo>
void backward_dx(int64_t rows, int64_t dim, const float* x, const float* gamma, const float* mean, const float* rstd,
                 const float* dout, const float* dout2, float* dx) {
#pragma omp parallel for schedule(static) if (rows * dim >= 16384)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float* g = dout + r * dim;
    const float* g2 = kTwo ? dout2 + r * dim : nullptr;
    const float mu = mean[r], rs = rstd[r];
    float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
    for (int64_t i = 0; i < dim; ++i) {
      const float xhat = (xr[i] - mu) * rs;
      const float dxhat = output_grad<kTwo>(g, g2, i) * gamma[i];
      sum_dxhat += dxhat;
      sum_dxhat_xhat = std::fma(dxhat, xhat, sum_dxhat_xhat);
    }
    const float mean_dxhat = sum_dxhat / static_cast<float>(dim);
    const float mean_dxhat_xhat = sum_dxhat_xhat / static_cast<float>(dim);
    float* d = dx + r * dim;
    for (int64_t i = 0; i < dim; ++i) {
      const float xhat = (xr[i] - mu) * rs;
      d[i] = rs * std::fma(-xhat, mean_dxhat_xhat, std::fma(output_grad<kTwo>(g, g2, i), gamma[i], -mean_dxhat));
    }
  }
}

template <bool kTwo>
void backward_params(int64_t rows, int64_t dim, const float* x, const float* mean, const float* rstd,
                     const float* dout, const float* dout2, float* dgamma, float* dbeta) {
  // Partial sums of dgamma and dbeta over fixed pieces of rows, added in piece order: the result
  // does not depend on the thread count. The scratch is the calling thread's (kept between calls);
  // the team reaches it through `partials`, never by name.
  constexpr int64_t kRowsPerPiece = 256;
  const int64_t pieces = (rows + kRowsPerPiece - 1) / kRowsPerPiece;
  thread_local std::vector<float> scratch;
  scratch.assign(static_cast<size_t>(pieces * 2 * dim), 0.0f);
  float* const partials = scratch.data();
#pragma omp parallel for schedule(static) if (rows * dim >= 16384)
  for (int64_t p = 0; p < pieces; ++p) {
    float* dg = partials + p * 2 * dim;
    float* db = dg + dim;
    for (int64_t r = p * kRowsPerPiece; r < std::min(rows, (p + 1) * kRowsPerPiece); ++r) {
      const float* xr = x + r * dim;
      const float* g = dout + r * dim;
      const float* g2 = kTwo ? dout2 + r * dim : nullptr;
      const float mu = mean[r], rs = rstd[r];
      for (int64_t i = 0; i < dim; ++i) {
        const float gi = output_grad<kTwo>(g, g2, i);
        const float xhat = (xr[i] - mu) * rs;
        dg[i] = std::fma(gi, xhat, dg[i]);
        db[i] += gi;
      }
    }
  }
  for (int64_t i = 0; i < dim; ++i) {
    float g = 0.0f, b = 0.0f;
    for (int64_t p = 0; p < pieces; ++p) {
      g += partials[p * 2 * dim + i];
      b += partials[p * 2 * dim + dim + i];
    }
    dgamma[i] = g;
    dbeta[i] = b;
  }
}

}  // namespace

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

void layer_norm_backward_dx(int64_t rows, int64_t dim, const float* x, const float* gamma, const float* mean,
                            const float* rstd, const float* dout, const float* dout2, float* dx) {
  if (dout2 != nullptr) {
    backward_dx<true>(rows, dim, x, gamma, mean, rstd, dout, dout2, dx);
  } else {
    backward_dx<false>(rows, dim, x, gamma, mean, rstd, dout, dout2, dx);
  }
}

void layer_norm_backward_params(int64_t rows, int64_t dim, const float* x, const float* mean, const float* rstd,
                                const float* dout, const float* dout2, float* dgamma, float* dbeta) {
  if (dout2 != nullptr) {
    backward_params<true>(rows, dim, x, mean, rstd, dout, dout2, dgamma, dbeta);
  } else {
    backward_params<false>(rows, dim, x, mean, rstd, dout, dout2, dgamma, dbeta);
  }
}

}  // namespace fp8kit::ops::cpu
