// FP8 GEMMs too small for cuBLASLt (a Linear with one output: its n or k of 1 breaks cuBLASLt's
// multiple-of-16 rule, and the padded copies cost more launches than the product): one thread per
// output, FP8 codes decoded and multiplied in float32, which is the CPU's FP8 GEMM (decode, then an
// fp32 GEMM scaled by the product of the scale_invs). Device pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "numerics/format.h"

namespace fp8kit::cuda {

// y[m, n] (float32) = (*a_scale_inv * *b_scale_inv) * sum over k of decode(a[m, k]) decode(b[n, k]),
// the sum taken in k order with fused multiply-adds (GemmArgs' "TN" layout: a [m, k], b [n, k]
// row-major). Scale pointers may be null (1). Meant for m n up to a few thousand outputs and small k.
void small_fp8_gemm(int64_t m, int64_t n, int64_t k, const uint8_t* a, Fp8Format a_format, const uint8_t* b,
                    Fp8Format b_format, const float* a_scale_inv, const float* b_scale_inv, float* y,
                    cudaStream_t stream);

}  // namespace fp8kit::cuda
