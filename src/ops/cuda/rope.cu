// Rotary position embedding kernel: a thread per rotated pair, rotated by ops/rope_pair.h (products and
// sums rounded explicitly, so that nvcc contracts nothing): ops/cpu/rope.cpp's bits.
#include "ops/cuda/rope.h"

#include <string>

#include "base/error.h"
#include "ops/cuda/round.cuh"
#include "ops/rope_pair.h"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ float as_float(float x) { return x; }
__device__ __forceinline__ float as_float(uint16_t x) { return bf16_to_float(x); }
// float outputs rounded to bf16 values when bf16; bf16 ones always rounded (to nearest even).
__device__ __forceinline__ void store(float y, bool bf16, float* out) { *out = maybe_bf16(y, bf16); }
__device__ __forceinline__ void store(float y, bool, uint16_t* out) { *out = float_to_bf16(y); }

template <typename In, typename Out>
__global__ void rotate_kernel(RopeShape s, int64_t start, const float* table, const In* x, float sign, bool bf16,
                              Out* out) {
  const int64_t half = s.head_dim / 2;
  const int64_t pair = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // over [tokens, heads, half]
  if (pair >= s.batch * s.seq * s.heads * half) return;
  const int64_t i = pair % half, head_token = pair / half;  // head_token = bt * heads + head
  const int64_t t = (head_token / s.heads) % s.seq;
  const float* cs = table + ((start + t) * half + i) * 2;
  const float c = cs[0], sn = __fmul_rn(sign, cs[1]);
  const int64_t lo = head_token * s.head_dim + i, hi = lo + half;
  const ops::RopePair y = ops::rope_rotate_pair(as_float(x[lo]), as_float(x[hi]), c, sn);
  store(y.lo, bf16, out + lo);
  store(y.hi, bf16, out + hi);
}

}  // namespace

template <typename In, typename Out>
void rope_rotate(const RopeShape& shape, int64_t start, const float* table, const In* x, float sign, bool bf16,
                 Out* out, cudaStream_t stream) {
  const int64_t pairs = shape.batch * shape.seq * shape.heads * (shape.head_dim / 2);
  if (pairs == 0) return;
  if (pairs >= (int64_t{1} << 31) * kThreads)
    throw Error("rope: " + std::to_string(pairs) + " pairs are too many for one launch");
  rotate_kernel<<<blocks_for(pairs, kThreads), kThreads, 0, stream>>>(shape, start, table, x, sign, bf16, out);
  check_launch("rope");
}

template void rope_rotate(const RopeShape&, int64_t, const float*, const float*, float, bool, float*, cudaStream_t);
template void rope_rotate(const RopeShape&, int64_t, const float*, const float*, float, bool, uint16_t*, cudaStream_t);
template void rope_rotate(const RopeShape&, int64_t, const float*, const uint16_t*, float, bool, float*, cudaStream_t);
template void rope_rotate(const RopeShape&, int64_t, const float*, const uint16_t*, float, bool, uint16_t*,
                          cudaStream_t);

}  // namespace fp8kit::cuda
