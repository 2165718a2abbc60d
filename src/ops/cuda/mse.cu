// MSE kernels: a block per piece of elements (dy written as it goes, the piece's squares summed as a
// tree), then one block adds the pieces' sums in a fixed order. No atomics: the same bits every run.
#include "ops/cuda/mse.h"

#include <string>

#include "base/error.h"
#include "ops/cuda/rows.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads) pieces_kernel(const float* y, const float* target, int64_t n,
                                                          int64_t piece, float factor, float* partials, float* dy) {
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * piece;
  const int64_t end = n < begin + piece ? n : begin + piece;
  float s = 0.0f;
  for (int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const float d = __fsub_rn(y[i], target[i]);
    s = fmaf(d, d, s);
    dy[i] = __fmul_rn(d, factor);
  }
  s = block_sum(s);
  if (threadIdx.x == 0) partials[blockIdx.x] = s;
}

// The pieces' sums in a fixed order (thread t: pieces t, t + kThreads, ...; then the block's tree),
// then the mean.
__global__ void __launch_bounds__(kThreads) total_kernel(const float* partials, int64_t pieces, int64_t n,
                                                         float* loss) {
  float s = 0.0f;
  for (int64_t p = threadIdx.x; p < pieces; p += kThreads) s = __fadd_rn(s, partials[p]);
  s = block_sum(s);
  if (threadIdx.x == 0) *loss = __fdiv_rn(s, static_cast<float>(n));
}

}  // namespace

void mse_loss(const float* y, const float* target, int64_t n, int64_t piece, float factor, float* partials,
              float* loss, float* dy, cudaStream_t stream) {
  if (n <= 0 || piece <= 0) throw Error("mse_loss: needs n >= 1 elements and pieces of >= 1, got " +
                                        std::to_string(n) + " and " + std::to_string(piece));
  const int64_t pieces = (n + piece - 1) / piece;
  if (pieces >= (int64_t{1} << 31)) throw Error("mse_loss: " + std::to_string(n) + " elements are too many");
  pieces_kernel<<<static_cast<unsigned>(pieces), kThreads, 0, stream>>>(y, target, n, piece, factor, partials, dy);
  check_launch("mse_loss");
  total_kernel<<<1, kThreads, 0, stream>>>(partials, pieces, n, loss);
  check_launch("mse_loss");
}

}  // namespace fp8kit::cuda
