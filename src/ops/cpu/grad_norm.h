// The global gradient norm's CPU core (ops/grad_norm.h): the squares' sum in a fixed order, and the
// clipping factor both devices apply.
#pragma once

#include <cstdint>

namespace fp8kit::ops::cpu {

// Elements per piece of the sum of squares (the GPU sums a piece per block).
inline constexpr int64_t kGradNormPiece = 16384;

// The sum of g[i]^2 over n elements, in double: each piece of kGradNormPiece elements summed in order,
// then the pieces in order. Threaded over pieces (bits independent of threads).
double sum_of_squares(const float* g, int64_t n);
// Its square root, rounded to float.
float global_norm(const float* g, int64_t n);
// g *= min(1, max_norm / (norm + 1e-6)) in float32 (nothing when max_norm <= 0 or the factor is not < 1).
void clip_to_norm(float* g, int64_t n, float norm, float max_norm);

}  // namespace fp8kit::ops::cpu
