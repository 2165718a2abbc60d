// Which shapes the GPU's fused FP8 quantization + GEMM (cuda::quantize_fp8_gemm, ops/cuda/quantize.h)
// takes, without CUDA: which Linears share an input's quantization depends on it on either device
// (ops::shares_input_operands).
#pragma once

#include <cstdint>

namespace fp8kit::cuda {

// x [rows, k] . w [n, k]^T: k a multiple of 32 (the small tile) up to 128, n a multiple of 8, and n k
// <= 4096 (w's codes held in shared memory, 4 words per thread).
constexpr int64_t kQuantizeGemmTile = 32, kQuantizeGemmMaxK = 128, kQuantizeGemmMaxWeights = 4096;

constexpr bool quantize_fp8_gemm_fits(int64_t k, int64_t n) {
  return k > 0 && k % kQuantizeGemmTile == 0 && k <= kQuantizeGemmMaxK && n > 0 && n % 8 == 0 &&
         n * k <= kQuantizeGemmMaxWeights;
}

}  // namespace fp8kit::cuda
