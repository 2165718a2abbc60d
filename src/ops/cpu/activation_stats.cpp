// Calibration statistics on the CPU: each thread a share of the rows with its own maxima and counts,
// merged at the end (max and integer sums: the same result for any split).
#include "ops/cpu/activation_stats.h"

#include "numerics/cast.h"
#include "numerics/histogram.h"

#include <cmath>
#include <vector>

namespace fp8kit::ops::cpu {
namespace {

float value_of(float v) { return v; }
float value_of(uint16_t v) { return bf16_to_float(v); }

template <typename T>
void accumulate(int64_t rows, int64_t cols, const T* x, float* channel_amax, int32_t* histogram) {
#pragma omp parallel if (rows * cols >= 65536)
  {
    std::vector<float> amax(channel_amax, channel_amax + cols);
    std::vector<int64_t> counts(histogram != nullptr ? kHistogramBins : 0, 0);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const float m = std::fabs(value_of(x[r * cols + c]));
        if (std::isnan(m)) continue;
        if (m > amax[c]) amax[c] = m;
        if (histogram != nullptr) ++counts[histogram_bin(m)];
      }
    }
#pragma omp critical
    {
      for (int64_t c = 0; c < cols; ++c)
        if (amax[c] > channel_amax[c]) channel_amax[c] = amax[c];
      for (size_t b = 0; b < counts.size(); ++b) histogram[b] += static_cast<int32_t>(counts[b]);
    }
  }
}

}  // namespace

void accumulate_activation_stats(int64_t rows, int64_t cols, const float* x, float* channel_amax, int32_t* histogram) {
  accumulate(rows, cols, x, channel_amax, histogram);
}

void accumulate_activation_stats(int64_t rows, int64_t cols, const uint16_t* x, float* channel_amax,
                                 int32_t* histogram) {
  accumulate(rows, cols, x, channel_amax, histogram);
}

}  // namespace fp8kit::ops::cpu
