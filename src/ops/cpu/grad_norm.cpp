// The global gradient norm and clipping on the CPU, threaded over pieces of the buffer.
#include "ops/cpu/grad_norm.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace fp8kit::ops::cpu {

double sum_of_squares(const float* g, int64_t n) {
  const int64_t pieces = (n + kGradNormPiece - 1) / kGradNormPiece;
  // The calling thread's scratch (kept between calls: a step allocates nothing); the team reaches it
  // through `partial`, never by name.
  thread_local std::vector<double> sums;
  sums.assign(static_cast<size_t>(pieces), 0.0);
  double* const partial = sums.data();
#pragma omp parallel for schedule(static) if (n >= 65536)
  for (int64_t p = 0; p < pieces; ++p) {
    double s = 0.0;
    for (int64_t i = p * kGradNormPiece; i < std::min(n, (p + 1) * kGradNormPiece); ++i)
      s += static_cast<double>(g[i]) * g[i];
    partial[p] = s;
  }
  double total = 0.0;
  for (const double s : sums) total += s;
  return total;
}

float global_norm(const float* g, int64_t n) { return static_cast<float>(std::sqrt(sum_of_squares(g, n))); }

void clip_to_norm(float* g, int64_t n, float norm, float max_norm) {
  if (!(max_norm > 0.0f)) return;
  const float factor = max_norm / (norm + 1e-6f);
  if (!(factor < 1.0f)) return;  // min(1, factor) = 1 (or a NaN norm): g stays
#pragma omp parallel for schedule(static) if (n >= 65536)
  for (int64_t i = 0; i < n; ++i) g[i] *= factor;
}

}  // namespace fp8kit::ops::cpu
