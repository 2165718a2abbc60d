// Warp-level tensor-core products (mma.sync m16n8k16, float32 sums) and the operand conversions they
// need: the decode kernels (gemv, decode attention) feed them FP8 codes decoded exactly to f16 pairs.
// Fragments (PTX's layout, g = lane / 4, t = lane % 4): a[0] = A[g][2t, 2t + 1], a[1] = A[g + 8][2t,
// 2t + 1], a[2] = A[g][2t + 8, 2t + 9], a[3] = A[g + 8][2t + 8, 2t + 9]; b0 = B[2t, 2t + 1][g], b1 =
// B[2t + 8, 2t + 9][g]; d[0], d[1] = D[g][2t, 2t + 1], d[2], d[3] = D[g + 8][2t, 2t + 1]. The low half of
// each word is the lower column (A) or row (B).
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <cstdint>

namespace fp8kit::cuda {

// d += a . b on f16 (bf16) operands.
__device__ __forceinline__ void mma_f16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The two FP8 codes in the low 16 bits of `codes` (low byte first) as an f16 pair, low half first:
// exact (every E4M3 and E5M2 value is an f16).
template <__nv_fp8_interpretation_t Kind>
__device__ __forceinline__ uint32_t fp8x2_to_f16x2(uint32_t codes) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(codes & 0xFFFFu), Kind);
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

// Two floats as an f16 pair (round to nearest even), lo in the low half.
__device__ __forceinline__ uint32_t f16x2(float lo, float hi) {
  const __half2_raw h = __half2(__floats2half2_rn(lo, hi));
  return static_cast<uint32_t>(h.x) | (static_cast<uint32_t>(h.y) << 16);
}

}  // namespace fp8kit::cuda
