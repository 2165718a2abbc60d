// RMSNorm forward/backward over rows of a [rows, dim] float32 array, threaded over rows.
#include "ops/cpu/rms_norm.h"

#include "numerics/cast.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace fp8kit::ops::cpu {

float rms_rstd(const float* x, int64_t dim, float eps) {
  float sq = 0.0f;
  for (int64_t i = 0; i < dim; ++i) sq += x[i] * x[i];
  return 1.0f / std::sqrt(sq / static_cast<float>(dim) + eps);
}

void rms_norm_forward(int64_t rows, int64_t dim, float eps, const float* x, const float* weight, bool bf16_out,
                      float* out, float* rstd) {
#pragma omp parallel for schedule(static) if (rows * dim >= 16384)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float rs = rms_rstd(xr, dim, eps);
    float* o = out + r * dim;
    for (int64_t i = 0; i < dim; ++i) {
      const float y = (xr[i] * rs) * weight[i];
      o[i] = bf16_out ? round_bf16(y) : y;
    }
    rstd[r] = rs;
  }
}

void add_rms_norm(int64_t rows, int64_t dim, float eps, uint16_t* residual, const uint16_t* delta,
                  const float* weight, uint16_t* out) {
#pragma omp parallel for schedule(static) if (rows * dim >= 16384)
  for (int64_t r = 0; r < rows; ++r) {
    thread_local std::vector<float> x;  // the row as float32 (each thread its own)
    x.resize(static_cast<size_t>(dim));
    uint16_t* res = residual + r * dim;
    for (int64_t i = 0; i < dim; ++i) {
      if (delta != nullptr) res[i] = float_to_bf16(bf16_to_float(res[i]) + bf16_to_float(delta[r * dim + i]));
      x[i] = bf16_to_float(res[i]);
    }
    const float rs = rms_rstd(x.data(), dim, eps);
    uint16_t* o = out + r * dim;
    for (int64_t i = 0; i < dim; ++i) o[i] = float_to_bf16((x[i] * rs) * weight[i]);
  }
}

void rms_norm_backward_dx(int64_t rows, int64_t dim, const float* x, const float* weight, const float* rstd,
                          const float* dout, float* dx) {
#pragma omp parallel for schedule(static) if (rows * dim >= 16384)
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * dim;
    const float* g = dout + r * dim;
    const float rs = rstd[r];
    float dot = 0.0f;  // sum of dout weight x
    for (int64_t i = 0; i < dim; ++i) dot += g[i] * weight[i] * xr[i];
    const float k = rs * rs * (dot / static_cast<float>(dim));
    float* d = dx + r * dim;
    for (int64_t i = 0; i < dim; ++i) d[i] = rs * (g[i] * weight[i] - xr[i] * k);
  }
}

void rms_norm_backward_weight(int64_t rows, int64_t dim, const float* x, const float* rstd, const float* dout,
                              float* dweight) {
  // Partial sums over fixed pieces of rows, added in piece order: the result does not depend on the
  // thread count. The scratch is the calling thread's (kept between calls); the team reaches it
  // through `partials`, never by name. std::fma: the bits whatever the compiler contracts, and the
  // GPU's (__fmaf_rn).
  const int64_t per_piece = kRmsNormWeightOrder.rows_per_piece, pieces = kRmsNormWeightOrder.pieces(rows);
  thread_local std::vector<float> scratch;
  scratch.assign(static_cast<size_t>(pieces * dim), 0.0f);
  float* const partials = scratch.data();
#pragma omp parallel for schedule(static) if (rows * dim >= 16384)
  for (int64_t p = 0; p < pieces; ++p) {
    float* dw = partials + p * dim;
    for (int64_t r = p * per_piece; r < std::min(rows, (p + 1) * per_piece); ++r) {
      const float* xr = x + r * dim;
      const float* g = dout + r * dim;
      const float rs = rstd[r];
      for (int64_t i = 0; i < dim; ++i) dw[i] = std::fma(g[i], xr[i] * rs, dw[i]);
    }
  }
  for (int64_t i = 0; i < dim; ++i) {
    float sum = 0.0f;
    for (int64_t p = 0; p < pieces; ++p) sum += partials[p * dim + i];
    dweight[i] = sum;
  }
}

}  // namespace fp8kit::ops::cpu
