// SwiGLU on the device: ops::cpu::swiglu_value's and swiglu_backward's operations in their order, each
// rounded explicitly (no contraction), with the accurate expf (within ~2 ulp of the CPU's).
#pragma once

namespace fp8kit::cuda {

__device__ __forceinline__ float swiglu_value(float g, float u) {
  return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}

// SwiGLU's backward at one element, ops::cpu::swiglu_backward's operations in its order, d being the
// gradient of silu(g) u: the gate's d u silu'(g) and up's d silu(g) (each alone where only one is
// wanted: a division and an exponential apiece).
__device__ __forceinline__ float swiglu_gate_gradient(float g, float u, float d) {
  const float sig = __fdiv_rn(1.0f, __fadd_rn(1.0f, expf(-g)));
  const float dsilu = __fmul_rn(sig, __fadd_rn(1.0f, __fmul_rn(g, __fsub_rn(1.0f, sig))));
  return __fmul_rn(__fmul_rn(d, u), dsilu);
}
__device__ __forceinline__ float swiglu_up_gradient(float g, float d) {
  return __fmul_rn(d, __fdiv_rn(g, __fadd_rn(1.0f, expf(-g))));
}

}  // namespace fp8kit::cuda
