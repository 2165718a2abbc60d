// Quantization statistics kernels: each thread casts a strided share of x exactly as quantize_fp8
// does (the same scale read, multiply or divide, clamp, hardware cvt) and counts and sums what it
// sees; blocks reduce by warp shuffles in a fixed order into partial records, which one block then
// adds in block order.
#include "ops/cuda/quant_stats.h"

#include <cuda_fp8.h>

#include <algorithm>

#include "base/error.h"
#include "ops/cuda/aligned.h"
#include "ops/cuda/fp8_cast.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

using ops::QuantStatsRecord;

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;

struct Acc {
  unsigned long long nonfinite = 0, saturated = 0, flushed = 0, subnormal = 0;
  double squares = 0, errors = 0;
  float amax = 0;

  // From a block's partial record, and as a record (the counts and sums; the caller adds what only it
  // knows).
  __device__ static Acc of(const QuantStatsRecord& r) {
    Acc a;
    a.nonfinite = r.nonfinite;
    a.saturated = r.saturated;
    a.flushed = r.flushed;
    a.subnormal = r.subnormal;
    a.squares = r.sum_squares;
    a.errors = r.error_squares;
    a.amax = r.amax;
    return a;
  }
  __device__ QuantStatsRecord record() const {
    QuantStatsRecord r{};
    r.nonfinite = nonfinite;
    r.saturated = saturated;
    r.flushed = flushed;
    r.subnormal = subnormal;
    r.sum_squares = squares;
    r.error_squares = errors;
    r.amax = amax;
    return r;
  }
  __device__ void merge(const Acc& o) {
    nonfinite += o.nonfinite;
    saturated += o.saturated;
    flushed += o.flushed;
    subnormal += o.subnormal;
    squares = __dadd_rn(squares, o.squares);
    errors = __dadd_rn(errors, o.errors);
    amax = fmaxf(amax, o.amax);
  }
  __device__ Acc down(int offset) const {
    Acc o;
    o.nonfinite = __shfl_down_sync(0xFFFFFFFFu, nonfinite, offset);
    o.saturated = __shfl_down_sync(0xFFFFFFFFu, saturated, offset);
    o.flushed = __shfl_down_sync(0xFFFFFFFFu, flushed, offset);
    o.subnormal = __shfl_down_sync(0xFFFFFFFFu, subnormal, offset);
    o.squares = __shfl_down_sync(0xFFFFFFFFu, squares, offset);
    o.errors = __shfl_down_sync(0xFFFFFFFFu, errors, offset);
    o.amax = __shfl_down_sync(0xFFFFFFFFu, amax, offset);
    return o;
  }
};

// The block's sum in thread 0 (every thread calls it).
__device__ Acc block_reduce(Acc a) {
  __shared__ alignas(alignof(Acc)) unsigned char storage[kWarps * sizeof(Acc)];  // no constructors in shared memory
  Acc* warps = reinterpret_cast<Acc*>(storage);
  for (int offset = 16; offset > 0; offset /= 2) a.merge(a.down(offset));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (lane == 0) warps[warp] = a;
  __syncthreads();
  if (warp == 0) {
    a = lane < kWarps ? warps[lane] : Acc{};
    for (int offset = 16; offset > 0; offset /= 2) a.merge(a.down(offset));
  }
  return a;
}

struct Params {
  const float* x;
  int64_t n, cols;
  const float* scale;
  EpilogueGradientArgs gradient;
  bool gradient_active;
  QuantStatsRecord* partials;
};

template <Fp8Format F, bool Divide>
__device__ __forceinline__ void count(Acc& a, float v, float s, double dequant) {
  constexpr float max = F == Fp8Format::E4M3 ? 448.0f : 57344.0f;
  constexpr float min_normal = F == Fp8Format::E4M3 ? 0x1p-6f : 0x1p-14f;
  constexpr __nv_fp8_interpretation_t kind = F == Fp8Format::E4M3 ? __NV_E4M3 : __NV_E5M2;
  if (!isfinite(v)) {
    ++a.nonfinite;
    if (isinf(v)) a.amax = __int_as_float(0x7F800000);
    return;
  }
  a.amax = fmaxf(a.amax, fabsf(v));
  const float scaled = Divide ? __fdiv_rn(v, s) : __fmul_rn(v, s);
  a.saturated += fabsf(scaled) > max;
  const float clamped = fminf(fmaxf(scaled, -max), max);
  const float code = decode_fp8<F>(static_cast<uint8_t>(__nv_cvt_float_to_fp8(clamped, __NV_SATFINITE, kind)));
  a.flushed += v != 0.0f && code == 0.0f;
  a.subnormal += code != 0.0f && fabsf(code) < min_normal;
  const double x = v;
  const double e = __dsub_rn(x, __dmul_rn(static_cast<double>(code), dequant));
  a.squares = __dadd_rn(a.squares, __dmul_rn(x, x));
  a.errors = __dadd_rn(a.errors, __dmul_rn(e, e));
}

template <Fp8Format F, bool Divide, bool Vector>
__global__ void __launch_bounds__(kThreads) parts_kernel(Params p) {
  const float s = *p.scale;
  const double dequant = Divide ? static_cast<double>(s) : __drcp_rn(static_cast<double>(s));
  const DeviceDropoutMask mask = p.gradient_active ? p.gradient.dropout.mask() : DeviceDropoutMask(0, 0, 0, 0);
  const auto value = [&](float v, int64_t i) { return p.gradient_active ? p.gradient(v, i, p.gradient.bias != nullptr ? i % p.cols : 0, mask) : v; };
  Acc a;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  if (Vector) {  // n % 4 == 0, x 16-byte aligned
    const auto* x4 = reinterpret_cast<const float4*>(p.x);
    for (int64_t j = first; j < p.n / 4; j += stride) {
      const float4 v = x4[j];
      count<F, Divide>(a, value(v.x, 4 * j), s, dequant);
      count<F, Divide>(a, value(v.y, 4 * j + 1), s, dequant);
      count<F, Divide>(a, value(v.z, 4 * j + 2), s, dequant);
      count<F, Divide>(a, value(v.w, 4 * j + 3), s, dequant);
    }
  } else {
    for (int64_t i = first; i < p.n; i += stride) count<F, Divide>(a, value(p.x[i], i), s, dequant);
  }
  a = block_reduce(a);
  if (threadIdx.x == 0) p.partials[blockIdx.x] = a.record();
}

__global__ void __launch_bounds__(kThreads) finish_kernel(const QuantStatsRecord* partials, int parts, int64_t n,
                                                          const float* scale, bool divide, const float* history,
                                                          int64_t history_length, QuantStatsRecord* record) {
  Acc a = threadIdx.x < parts ? Acc::of(partials[threadIdx.x]) : Acc{};
  float h = 0.0f;
  for (int64_t i = threadIdx.x; history != nullptr && i < history_length; i += kThreads) h = fmaxf(h, history[i]);
  a = block_reduce(a);
  __syncthreads();  // block_reduce's shared memory is used again below
  Acc hmax;
  hmax.amax = h;
  hmax = block_reduce(hmax);
  if (threadIdx.x == 0) {
    QuantStatsRecord r = a.record();
    r.count = static_cast<uint64_t>(n);
    r.scale = divide ? __fdiv_rn(1.0f, *scale) : *scale;
    r.history_amax = hmax.amax;
    *record = r;
  }
}

template <Fp8Format F, bool Divide>
void launch(const Params& p, int parts, bool vector, cudaStream_t stream) {
  vector ? parts_kernel<F, Divide, true><<<parts, kThreads, 0, stream>>>(p)
         : parts_kernel<F, Divide, false><<<parts, kThreads, 0, stream>>>(p);
}

}  // namespace

void quant_stats(const float* x, int64_t n, const ops::QuantStatsSpec& spec, const EpilogueGradient& gradient,
                 int32_t* record, int32_t* partials, cudaStream_t stream, int64_t cols) {
  static_assert(ops::kQuantStatsParts <= kThreads, "the finishing block adds one partial per thread");
  if (spec.scale == nullptr || record == nullptr || partials == nullptr || n < 0 || cols <= 0 || n % cols != 0)
    throw Error("quant_stats: needs the scale, the record, its partials and a whole number of rows");
  if (!aligned(record, 8) || !aligned(partials, 8)) throw Error("quant_stats: records must be 8-byte aligned");
  Params p{x, n, cols, spec.scale, {}, gradient.active(), reinterpret_cast<QuantStatsRecord*>(partials)};
  if (p.gradient_active) p.gradient = epilogue_gradient_args(gradient, n / cols, cols, "quant_stats");
  const bool vector = n % 4 == 0 && aligned(x, 16);
  const int64_t per_block = static_cast<int64_t>(kThreads) * (vector ? 16 : 4);
  const int parts = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(ops::kQuantStatsParts,
                                                                             (n + per_block - 1) / per_block)));
  if (spec.format == Fp8Format::E4M3) {
    spec.divide ? launch<Fp8Format::E4M3, true>(p, parts, vector, stream)
                : launch<Fp8Format::E4M3, false>(p, parts, vector, stream);
  } else {
    spec.divide ? launch<Fp8Format::E5M2, true>(p, parts, vector, stream)
                : launch<Fp8Format::E5M2, false>(p, parts, vector, stream);
  }
  check_launch("quant_stats");
  finish_kernel<<<1, kThreads, 0, stream>>>(p.partials, parts, n, spec.scale, spec.divide, spec.history,
                                            spec.history_length, reinterpret_cast<QuantStatsRecord*>(record));
  check_launch("quant_stats (finish)");
}

}  // namespace fp8kit::cuda
