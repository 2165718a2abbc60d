// The global gradient norm and clipping on the GPU (ops/cpu/grad_norm.h's semantics). Device pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fp8kit::cuda {

// out[0] = the sum of squares of g [n] (in double: a block per piece of ops::cpu::kGradNormPiece
// elements, then one block adds the pieces), or with `root` its square root (the L2 norm), rounded to
// float. workspace: grad_norm_workspace(n) doubles.
void sum_of_squares(const float* g, int64_t n, bool root, float* out, double* workspace, cudaStream_t stream);
int64_t grad_norm_workspace(int64_t n);
// With `root`, norm[0] = sqrt(norm[0]) first (a sum of squares given, in double, rounded to float);
// then, when max_norm > 0, g *= min(1, max_norm / (norm + 1e-6)), the factor read from norm on the device.
void clip_to_norm(float* g, int64_t n, float max_norm, float* norm, bool root, cudaStream_t stream);

}  // namespace fp8kit::cuda
