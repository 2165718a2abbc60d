// RMSNorm kernels: a block per row (threads stride the row, 4 floats at a time where the row is
// 16-byte aligned); dweight summed in the CPU op's order (ops/cuda/ordered_sum.cuh), without atomics.
#include "ops/cuda/rms_norm.h"

#include <initializer_list>
#include <string>

#include "base/error.h"
#include "ops/cpu/rms_norm.h"
#include "ops/cuda/activation_out.cuh"
#include "ops/cuda/aligned.h"
#include "ops/cuda/ordered_sum.cuh"
#include "ops/cuda/round.cuh"
#include "ops/cuda/rows.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kMaxThreads = 512;

template <int V>
__global__ void forward_kernel(int64_t dim, float eps, const float* x, const float* weight, bool bf16, float* out,
                               float* rstd) {
  const int64_t r = blockIdx.x, n = dim / V;
  const auto* xr = reinterpret_cast<const Floats<V>*>(x + r * dim);
  const auto* w = reinterpret_cast<const Floats<V>*>(weight);
  auto* o = reinterpret_cast<Floats<V>*>(out + r * dim);
  float sq = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const Floats<V> a = xr[j];
#pragma unroll
    for (int k = 0; k < V; ++k) sq = __fmaf_rn(a.v[k], a.v[k], sq);
  }
  const float rs = 1.0f / sqrtf(block_sum(sq) / static_cast<float>(dim) + eps);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const Floats<V> a = xr[j], g = w[j];
    Floats<V> y;
#pragma unroll
    for (int k = 0; k < V; ++k) y.v[k] = maybe_bf16(__fmul_rn(__fmul_rn(a.v[k], rs), g.v[k]), bf16);
    o[j] = y;
  }
  if (threadIdx.x == 0) rstd[r] = rs;
}

// weight[j V .. j V + V - 1].
template <int V>
__device__ __forceinline__ void load_weights(const float* weight, int64_t j, float (&w)[V]) {
  if constexpr (V == 8) {
    const float4* p = reinterpret_cast<const float4*>(weight) + 2 * j;
    const float4 a = p[0], b = p[1];
    w[0] = a.x, w[1] = a.y, w[2] = a.z, w[3] = a.w, w[4] = b.x, w[5] = b.y, w[6] = b.z, w[7] = b.w;
  } else {
#pragma unroll
    for (int i = 0; i < V; ++i) w[i] = weight[j * V + i];
  }
}

// Starts bringing weight[8 j .. 8 j + 7] into L1 for load_weights: the loads' latency then overlaps the
// row's sum of squares instead of following it.
__device__ __forceinline__ void prefetch_weights(const float* weight, int64_t j) {
  asm volatile("prefetch.global.L1 [%0];" ::"l"(__cvta_generic_to_global(weight + j * 8)));
  asm volatile("prefetch.global.L1 [%0];" ::"l"(__cvta_generic_to_global(weight + j * 8 + 4)));
}

// ops::add_rms_norm: a row's thread t holds its vectors t, t + count, ... (Chunks of them; RowThread):
// the residual (+ delta, stored back), then the normalized results, until the row's amax is known.
template <int V, int Chunks, int Blocks>
__global__ void __launch_bounds__(kRowKernelThreads)
    add_rms_norm_kernel(int64_t dim, float eps, uint16_t* residual, const uint16_t* delta, const float* weight,
                        ActivationOutArgs out) {
  wait_for_prior_grids();
  allow_dependent_launch();
  const RowThread t = row_thread<Blocks>();
  const int64_t r = t.row, n = dim / V;
  const float preset = tensor_scale(out);
  auto* res = reinterpret_cast<Bf16s<V>*>(residual + r * dim);
  Bf16s<V> x[Chunks] = {};
#pragma unroll
  for (int k = 0; k < Chunks; ++k) {
    const int64_t j = t.index + k * t.count;
    if (j < n) {
      x[k] = res[j];
      if constexpr (V == 8) prefetch_weights(weight, j);  // (not the unaligned path: it would spill more)
    }
  }
  if (delta != nullptr) {
    const auto* d = reinterpret_cast<const Bf16s<V>*>(delta + r * dim);
    Bf16s<V> e[Chunks] = {};
#pragma unroll
    for (int k = 0; k < Chunks; ++k) {
      const int64_t j = t.index + k * t.count;
      if (j < n) e[k] = d[j];
    }
#pragma unroll
    for (int k = 0; k < Chunks; ++k) {
      const int64_t j = t.index + k * t.count;
      if (j >= n) continue;
#pragma unroll
      for (int i = 0; i < V; ++i)
        x[k].h[i] = float_to_bf16(__fadd_rn(bf16_to_float(x[k].h[i]), bf16_to_float(e[k].h[i])));
      res[j] = x[k];
    }
  }
  float sq = 0.0f;
#pragma unroll
  for (int k = 0; k < Chunks; ++k) {
    if (t.index + k * t.count >= n) continue;
#pragma unroll
    for (int i = 0; i < V; ++i) {
      const float f = bf16_to_float(x[k].h[i]);
      sq = __fmaf_rn(f, f, sq);
    }
  }
  // rms_norm_forward's rstd and products, each operation rounded as the CPU's.
  const float rs =
      __fdiv_rn(1.0f, __fsqrt_rn(__fadd_rn(__fdiv_rn(row_sum<Blocks>(sq), static_cast<float>(dim)), eps)));
  uint32_t amax = 0;
#pragma unroll
  for (int k = 0; k < Chunks; ++k) {
    const int64_t j = t.index + k * t.count;
    if (j >= n) continue;
    float w[V];
    load_weights<V>(weight, j, w);
#pragma unroll
    for (int i = 0; i < V; ++i) x[k].h[i] = float_to_bf16(__fmul_rn(__fmul_rn(bf16_to_float(x[k].h[i]), rs), w[i]));
    amax = raise_amax(amax, x[k]);
  }
  const float scale = activation_scale<Blocks>(out, t, amax, preset);
#pragma unroll
  for (int k = 0; k < Chunks; ++k) {
    const int64_t j = t.index + k * t.count;
    if (j < n) store_activation<V>(out, r * dim + j * V, x[k], scale);
  }
  row_done<Blocks>();
}

// dx = rstd (dout weight - x k) (+ residual), k = rstd^2 mean(dout weight x).
template <int V>
__global__ void dx_kernel(int64_t dim, const float* x, const float* weight, const float* rstd, const float* dout,
                          const float* residual, float* dx) {
  const int64_t r = blockIdx.x, n = dim / V;
  const auto* xr = reinterpret_cast<const Floats<V>*>(x + r * dim);
  const auto* gr = reinterpret_cast<const Floats<V>*>(dout + r * dim);
  const auto* w = reinterpret_cast<const Floats<V>*>(weight);
  auto* d = reinterpret_cast<Floats<V>*>(dx + r * dim);
  const float rs = rstd[r];
  float dot = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const Floats<V> a = xr[j], g = gr[j], b = w[j];
#pragma unroll
    for (int k = 0; k < V; ++k) dot = __fmaf_rn(__fmul_rn(g.v[k], b.v[k]), a.v[k], dot);
  }
  const float scale = rs * rs * (block_sum(dot) / static_cast<float>(dim));
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const Floats<V> a = xr[j], g = gr[j], b = w[j];
    Floats<V> y;
#pragma unroll
    for (int k = 0; k < V; ++k) y.v[k] = rs * (g.v[k] * b.v[k] - a.v[k] * scale);
    if (residual != nullptr) {  // ops::add's rounding, after the norm's value is rounded
      const Floats<V> res = reinterpret_cast<const Floats<V>*>(residual + r * dim)[j];
#pragma unroll
      for (int k = 0; k < V; ++k) y.v[k] = __fadd_rn(res.v[k], y.v[k]);
    }
    d[j] = y;
  }
}

// dweight in ops::cpu::rms_norm_backward_weight's order: pieces of kRmsNormWeightOrder's rows, each
// summed row by row as fma(dout, x rstd, sum) (the CPU's std::fma), then the pieces in order. Block
// (piece, 32 columns) -> partials [pieces, dim].
constexpr int64_t kPieceRows = ops::cpu::kRmsNormWeightOrder.rows_per_piece;
__global__ void __launch_bounds__(kOrderedSumThreads)
    weight_pieces_kernel(int64_t rows, int64_t dim, const float* x, const float* rstd, const float* dout,
                         float* partials) {
  const int64_t col = static_cast<int64_t>(blockIdx.y) * 32 + threadIdx.x % 32;
  const int64_t column = col < dim ? col : dim - 1;  // for the loads of lanes past the last column
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kPieceRows;
  const int64_t end = rows < begin + kPieceRows ? rows : begin + kPieceRows;
  float sums[2];  // sums[1] unused: the terms are dout and x rstd, fused in one multiply-add
  ordered_sum<2>(
      begin, end, col < dim,
      [&](int64_t r, float(&v)[2]) {
        v[0] = dout[r * dim + column];
        v[1] = __fmul_rn(x[r * dim + column], rstd[r]);
      },
      [](float(&acc)[2], const float(&e)[2]) { acc[0] = __fmaf_rn(e[0], e[1], acc[0]); }, sums);
  if (threadIdx.x < 32 && col < dim) partials[blockIdx.x * dim + col] = sums[0];
}

void check_shape(int64_t rows, int64_t dim, const char* what) {
  if (rows < 0 || dim <= 0 || rows >= (int64_t{1} << 31) || (dim + 31) / 32 > 65535)
    throw Error(std::string(what) + ": unsupported shape [" + std::to_string(rows) + ", " + std::to_string(dim) + "]");
}

// Whether every row of these [rows, dim] arrays (and weight [dim]) can be read 4 floats at a time.
bool vectorizable(int64_t dim, std::initializer_list<const float*> pointers) {
  if (dim % 4 != 0) return false;
  for (const float* p : pointers)
    if (!aligned(p, 16)) return false;
  return true;
}

}  // namespace

void add_rms_norm(int64_t rows, int64_t dim, float eps, uint16_t* residual, const uint16_t* delta, const float* weight,
                  const ActivationOutArgs& out, cudaStream_t stream) {
  check_shape(rows, dim, "add_rms_norm");
  if (dim > kRowKernelMaxCols)
    throw Error("add_rms_norm: rows of " + std::to_string(dim) + " columns are longer than the GPU kernel holds (" +
                std::to_string(kRowKernelMaxCols) + ")");
  if (rows == 0) {
    finish_empty_activation(out, stream);
    return;
  }
  const bool vector = dim % 8 == 0 && aligned(residual, 16) && aligned(delta, 16) && aligned(weight, 16) &&
                      aligned(out.bf16, 16) && aligned(out.codes, 8);
  // At few rows, a cluster shares a row's kRowKernelThreads threads: the same sums, the same bits.
  launch_row_kernel(rows, dim, vector, kRowKernelThreads, [&](auto v, auto chunks, auto blocks, int threads) {
    launch_rows(add_rms_norm_kernel<decltype(v)::value, decltype(chunks)::value, decltype(blocks)::value>, rows,
                blocks, threads, stream, dim, eps, residual, delta, weight, out);
  });
  check_launch("add_rms_norm");
}

void rms_norm_forward(int64_t rows, int64_t dim, float eps, const float* x, const float* weight, bool bf16_out,
                      float* out, float* rstd, cudaStream_t stream) {
  check_shape(rows, dim, "rms_norm_forward");
  if (rows == 0) return;
  const unsigned blocks = static_cast<unsigned>(rows);
  if (vectorizable(dim, {x, weight, out})) {
    forward_kernel<4>
        <<<blocks, row_threads(dim / 4, kMaxThreads), 0, stream>>>(dim, eps, x, weight, bf16_out, out, rstd);
  } else {
    forward_kernel<1><<<blocks, row_threads(dim, kMaxThreads), 0, stream>>>(dim, eps, x, weight, bf16_out, out, rstd);
  }
  check_launch("rms_norm_forward");
}

int64_t rms_norm_backward_workspace(int64_t rows, int64_t dim) { return piece_count(rows, kPieceRows) * dim; }

void rms_norm_backward(int64_t rows, int64_t dim, const float* x, const float* weight, const float* rstd,
                       const float* dout, const float* residual, float* dx, float* dweight, float* workspace,
                       cudaStream_t stream) {
  check_shape(rows, dim, "rms_norm_backward");
  if (rows == 0) {
    FP8KIT_CUDA_CHECK(cudaMemsetAsync(dweight, 0, dim * sizeof(float), stream));
    return;
  }
  const int64_t pieces = piece_count(rows, kPieceRows);
  weight_pieces_kernel<<<dim3(static_cast<unsigned>(pieces), blocks_for(dim, 32)), kOrderedSumThreads, 0, stream>>>(
      rows, dim, x, rstd, dout, workspace);
  check_launch("rms_norm_backward");
  add_pieces<1>(pieces, dim, workspace, {{dweight}}, stream);
  const unsigned blocks = static_cast<unsigned>(rows);
  if (vectorizable(dim, {x, weight, dout, dx, residual})) {
    dx_kernel<4><<<blocks, row_threads(dim / 4, kMaxThreads), 0, stream>>>(dim, x, weight, rstd, dout, residual, dx);
  } else {
    dx_kernel<1><<<blocks, row_threads(dim, kMaxThreads), 0, stream>>>(dim, x, weight, rstd, dout, residual, dx);
  }
  check_launch("rms_norm_backward");
}

}  // namespace fp8kit::cuda
