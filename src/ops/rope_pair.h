// One RoPE rotation of a pair (x[i], x[i + head_dim / 2]) by a table entry (cos, sin), written once for
// the CPU cores and the CUDA kernels (rope, kv_append): each product rounded to float32, then the
// difference or sum, never a fused multiply-add, so that both devices give the same bits.
#pragma once

#include "base/host_device.h"

namespace fp8kit::ops {

struct RopePair {
  float lo, hi;
};

// lo' = lo c - hi s, hi' = hi c + lo s.
FP8KIT_HOST_DEVICE inline RopePair rope_rotate_pair(float lo, float hi, float c, float s) {
#if defined(__CUDA_ARCH__)
  return {__fsub_rn(__fmul_rn(lo, c), __fmul_rn(hi, s)), __fadd_rn(__fmul_rn(hi, c), __fmul_rn(lo, s))};
#else
  // volatile: -march=native would otherwise let the compiler fuse a product into the sum.
  volatile float lo_c = lo * c, hi_s = hi * s, hi_c = hi * c, lo_s = lo * s;
  return {lo_c - hi_s, hi_c + lo_s};
#endif
}

}  // namespace fp8kit::ops
