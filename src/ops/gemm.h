// GEMMs of the CPU path. float32 GEMM through OpenBLAS; the FP8 GEMM computes from FP8 codes and
// their scales exactly as an FP8 tensor core would with an fp32 accumulator: codes decoded exactly
// (256-entry tables), products accumulated in float32, the sum multiplied by the two scale_invs.
#pragma once

#include "numerics/format.h"

#include <cstdint>
#include <span>

namespace fp8kit::ops {

// Row-major, contiguous operands. op(A) is [M, K] (A is [K, M] when trans_a), op(B) is [K, N]
// (B is [N, K] when trans_b), C is [M, N].
struct GemmShape {
  int64_t m, n, k;
  bool trans_a = false, trans_b = false;
};

// C = alpha op(A) op(B) + beta C (beta 0 ignores C's old contents, NaN included). OpenBLAS runs
// single-threaded; large GEMMs are cut into fixed pieces (rows of C, or slices of k whose partial
// products are added in order) spread over the OpenMP threads: results do not depend on the
// thread count.
void gemm_f32(const GemmShape& shape, float alpha, const float* a, const float* b, float beta, float* c);

// An FP8 operand: codes laid out as the float operand would be, and the factor that dequantizes them.
struct Fp8Operand {
  const uint8_t* codes;
  Fp8Format format;
  float scale_inv;
};

// C = (a.scale_inv * b.scale_inv) * op(decode(A)) op(decode(B)) + beta C, fp32 accumulation.
void gemm_fp8(const GemmShape& shape, const Fp8Operand& a, const Fp8Operand& b, float beta, float* c);

// The exact float value of every FP8 code (NaN codes give NaN; E5M2 0x7C/0xFC give +-inf).
std::span<const float, 256> fp8_values(Fp8Format format);
// out[i] = value of codes[i] (unscaled).
void decode_fp8(std::span<const uint8_t> codes, Fp8Format format, std::span<float> out);

}  // namespace fp8kit::ops
