// The global gradient norm and clipping on the GPU (ops/cpu/grad_norm.h's semantics). Device pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fp8kit::cuda {

// norm[0] = the L2 norm of g [n] (squares in double: a block per piece of ops::cpu::kGradNormPiece
// elements, then one block adds the pieces); then, when max_norm > 0, g *= min(1, max_norm /
// (norm + 1e-6)), the factor read from norm on the device. workspace: grad_norm_workspace(n) doubles.
void clip_by_global_norm(float* g, int64_t n, float max_norm, float* norm, double* workspace, cudaStream_t stream);
int64_t grad_norm_workspace(int64_t n);

}  // namespace fp8kit::cuda
