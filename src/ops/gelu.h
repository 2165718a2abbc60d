// GELU as an inference op (the tanh approximation of ops/activation.h): a bf16 GEMM output in, its GELU
// out as the next GEMM reads it (bf16, or E4M3 codes: ops/activation_out.h), in one pass. A training
// Linear applies GELU in its own epilogue (ops/linear.h).
#pragma once

#include "ops/activation_out.h"
#include "ops/context.h"
#include "tensor/tensor.h"

namespace fp8kit::ops {

// x [rows, cols] bf16 -> out = bf16(gelu(x)) [rows, cols], written as `out` says (fp8: ops::quantize's
// bytes of that bf16 result). The GPU's tanhf is within 2 ulp of the CPU's (out within a bf16 step of
// the CPU's where the two round differently); cols <= 32768 there.
void gelu(Context& c, const Tensor& x, const ActivationOut& out);

}  // namespace fp8kit::ops
