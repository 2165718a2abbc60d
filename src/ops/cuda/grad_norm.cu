// Global gradient norm kernels: partial sums of squares per piece (double, a block tree), one block
// adding the pieces (and taking the root), then a scaling pass that reads the factor on the device.
#include "ops/cuda/grad_norm.h"

#include <string>

#include "base/error.h"
#include "ops/cpu/grad_norm.h"
#include "ops/cuda/round.cuh"
#include "ops/cuda/rows.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kFinalThreads = 1024;
constexpr int64_t kPiece = ops::cpu::kGradNormPiece;

__global__ void piece_kernel(const float* g, int64_t n, double* partials) {
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kPiece;
  const int64_t end = n < begin + kPiece ? n : begin + kPiece;
  double s = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double v = g[i];
    s = fma(v, v, s);
  }
  s = block_sum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

__global__ void sum_kernel(const double* partials, int64_t pieces, bool root, float* out) {
  double s = 0.0;
  for (int64_t p = threadIdx.x; p < pieces; p += blockDim.x) s += partials[p];
  s = block_sum(s);
  if (threadIdx.x == 0) *out = static_cast<float>(root ? sqrt(s) : s);
}

__global__ void root_kernel(float* norm) { *norm = static_cast<float>(sqrt(static_cast<double>(*norm))); }

// A grid of a few blocks per SM striding over g: when the factor leaves g as it is, the pass costs a
// few microseconds, not a launch of a block per 256 elements that each return at once.
__global__ void clip_kernel(float* g, int64_t n, const float* norm, float max_norm) {
  const float factor = __fdiv_rn(max_norm, __fadd_rn(*norm, 1e-6f));
  if (!(factor < 1.0f)) return;  // min(1, factor) = 1 (or a NaN norm): g stays
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    g[i] = __fmul_rn(g[i], factor);
}

}  // namespace

int64_t grad_norm_workspace(int64_t n) { return (n + kPiece - 1) / kPiece; }

void sum_of_squares(const float* g, int64_t n, bool root, float* out, double* workspace, cudaStream_t stream) {
  if (n < 0 || n >= (int64_t{1} << 31) * kThreads)
    throw Error("clip_by_global_norm: " + std::to_string(n) + " elements are too many for one launch");
  const int64_t pieces = grad_norm_workspace(n);
  if (pieces > 0) {
    piece_kernel<<<static_cast<unsigned>(pieces), kThreads, 0, stream>>>(g, n, workspace);
    check_launch("clip_by_global_norm");
  }
  sum_kernel<<<1, kFinalThreads, 0, stream>>>(workspace, pieces, root, out);
  check_launch("clip_by_global_norm");
}

void clip_to_norm(float* g, int64_t n, float max_norm, float* norm, bool root, cudaStream_t stream) {
  if (root) {
    root_kernel<<<1, 1, 0, stream>>>(norm);
    check_launch("clip_by_global_norm");
  }
  if (max_norm > 0.0f && n > 0) {
    clip_kernel<<<strided_blocks(n, kThreads), kThreads, 0, stream>>>(g, n, norm, max_norm);
    check_launch("clip_by_global_norm");
  }
}

}  // namespace fp8kit::cuda
