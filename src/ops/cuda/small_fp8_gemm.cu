// The small FP8 GEMM kernel: thread (i, j) of y walks row i of a and row j of b.
#include "ops/cuda/small_fp8_gemm.h"

#include <string>

#include "base/error.h"
#include "ops/cuda/fp8_cast.cuh"
#include "ops/cuda/round.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 128;

template <Fp8Format A, Fp8Format B>
__global__ void small_gemm_kernel(int64_t m, int64_t n, int64_t k, const uint8_t* a, const uint8_t* b,
                                  const float* a_scale_inv, const float* b_scale_inv, float* y) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= m * n) return;
  const int64_t row = i / n, col = i % n;
  const uint8_t* ar = a + row * k;
  const uint8_t* br = b + col * k;
  float dot = 0.0f;
  for (int64_t j = 0; j < k; ++j) dot = __fmaf_rn(decode_fp8<A>(ar[j]), decode_fp8<B>(br[j]), dot);
  const float alpha = __fmul_rn(a_scale_inv != nullptr ? *a_scale_inv : 1.0f, b_scale_inv != nullptr ? *b_scale_inv : 1.0f);
  y[i] = __fmul_rn(alpha, dot);
}

template <Fp8Format A>
void launch(Fp8Format b_format, int64_t m, int64_t n, int64_t k, const uint8_t* a, const uint8_t* b,
            const float* a_scale_inv, const float* b_scale_inv, float* y, cudaStream_t stream) {
  const unsigned blocks = blocks_for(m * n, kThreads);
  if (b_format == Fp8Format::E4M3) {
    small_gemm_kernel<A, Fp8Format::E4M3><<<blocks, kThreads, 0, stream>>>(m, n, k, a, b, a_scale_inv, b_scale_inv, y);
  } else {
    small_gemm_kernel<A, Fp8Format::E5M2><<<blocks, kThreads, 0, stream>>>(m, n, k, a, b, a_scale_inv, b_scale_inv, y);
  }
}

}  // namespace

void small_fp8_gemm(int64_t m, int64_t n, int64_t k, const uint8_t* a, Fp8Format a_format, const uint8_t* b,
                    Fp8Format b_format, const float* a_scale_inv, const float* b_scale_inv, float* y,
                    cudaStream_t stream) {
  const auto shape = [&] { return std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k); };
  if (m <= 0 || n <= 0 || k <= 0) throw Error("small_fp8_gemm: m, n and k must be positive, got " + shape());
  if (m * n >= int64_t{kThreads} << 31) throw Error("small_fp8_gemm: " + shape() + " has too many outputs");
  if (a == nullptr || b == nullptr || y == nullptr) throw Error("small_fp8_gemm: a, b and y must be device pointers");
  if (a_format == Fp8Format::E4M3) {
    launch<Fp8Format::E4M3>(b_format, m, n, k, a, b, a_scale_inv, b_scale_inv, y, stream);
  } else {
    launch<Fp8Format::E5M2>(b_format, m, n, k, a, b, a_scale_inv, b_scale_inv, y, stream);
  }
  check_launch("small_fp8_gemm");
}

}  // namespace fp8kit::cuda
