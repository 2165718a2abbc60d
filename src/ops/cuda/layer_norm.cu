// LayerNorm kernels: one warp per row (lanes stride the row) up to kMaxWarpDim, a block per row
// beyond (threads stride the row, 4 floats at a time where it is 16-byte aligned: a Transformer's
// hidden 4096); the backward's dgamma/dbeta are summed in the CPU op's order
// (ops/cuda/ordered_sum.cuh), without atomics.
#include "ops/cuda/layer_norm.h"

#include <initializer_list>
#include <string>

#include "base/error.h"
#include "ops/cuda/aligned.h"
#include "ops/cuda/ordered_sum.cuh"
#include "ops/cuda/round.cuh"
#include "ops/cuda/rows.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int64_t kMaxWarpDim = 256;
constexpr int kMaxRowThreads = 512;

__global__ void forward_kernel(int64_t rows, int dim, float eps, const float* x, const float* gamma, const float* beta,
                               bool bf16, float* out, float* mean, float* rstd) {
  const int lane = threadIdx.x % 32;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (r >= rows) return;
  const float* xr = x + r * dim;
  float sum = 0.0f;
  for (int i = lane; i < dim; i += 32) sum += xr[i];
  const float mu = warp_sum(sum) / static_cast<float>(dim);
  float sq = 0.0f;
  for (int i = lane; i < dim; i += 32) sq += (xr[i] - mu) * (xr[i] - mu);
  const float var = warp_sum(sq) / static_cast<float>(dim);
  const float rs = 1.0f / sqrtf(var + eps);
  for (int i = lane; i < dim; i += 32) {
    const float inv = rs * gamma[i];
    out[r * dim + i] = maybe_bf16(xr[i] * inv + (beta[i] - mu * inv), bf16);
  }
  if (lane == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
}

// The output gradient at i: dout[i], or dout[i] + dout2[i].
__device__ __forceinline__ float output_grad(const float* dout, const float* dout2, int64_t i) {
  return dout2 != nullptr ? dout[i] + dout2[i] : dout[i];
}

// dx, one warp per row (as the forward).
__global__ void dx_kernel(int64_t rows, int dim, const float* x, const float* gamma, const float* mean,
                          const float* rstd, const float* dout, const float* dout2, float* dx, const float* residual) {
  const int lane = threadIdx.x % 32;
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (r >= rows) return;
  const float* xr = x + r * dim;
  const float mu = mean[r], rs = rstd[r];
  float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
  for (int i = lane; i < dim; i += 32) {
    const float xhat = (xr[i] - mu) * rs;
    const float dxhat = output_grad(dout, dout2, r * dim + i) * gamma[i];
    sum_dxhat += dxhat;
    sum_dxhat_xhat += dxhat * xhat;
  }
  const float mean_dxhat = warp_sum(sum_dxhat) / static_cast<float>(dim);
  const float mean_dxhat_xhat = warp_sum(sum_dxhat_xhat) / static_cast<float>(dim);
  for (int i = lane; i < dim; i += 32) {
    const float xhat = (xr[i] - mu) * rs;
    const float d = rs * (output_grad(dout, dout2, r * dim + i) * gamma[i] - mean_dxhat - xhat * mean_dxhat_xhat);
    dx[r * dim + i] = residual != nullptr ? __fadd_rn(residual[r * dim + i], d) : d;  // add's rounding, no FMA
  }
}

// A block per row, V floats at a time: the forward_kernel's formulas, the row's sums a block tree.
template <int V>
__global__ void row_forward_kernel(int64_t dim, float eps, const float* x, const float* gamma, const float* beta,
                                   bool bf16, float* out, float* mean, float* rstd) {
  const int64_t r = blockIdx.x, n = dim / V;
  const auto* xr = reinterpret_cast<const Floats<V>*>(x + r * dim);
  const auto* g = reinterpret_cast<const Floats<V>*>(gamma);
  const auto* b = reinterpret_cast<const Floats<V>*>(beta);
  auto* o = reinterpret_cast<Floats<V>*>(out + r * dim);
  float sum = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const Floats<V> a = xr[j];
#pragma unroll
    for (int k = 0; k < V; ++k) sum += a.v[k];
  }
  const float mu = block_sum(sum) / static_cast<float>(dim);
  float sq = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const Floats<V> a = xr[j];
#pragma unroll
    for (int k = 0; k < V; ++k) sq += (a.v[k] - mu) * (a.v[k] - mu);
  }
  const float rs = 1.0f / sqrtf(block_sum(sq) / static_cast<float>(dim) + eps);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const Floats<V> a = xr[j], gg = g[j], bb = b[j];
    Floats<V> y;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float inv = rs * gg.v[k];
      y.v[k] = maybe_bf16(a.v[k] * inv + (bb.v[k] - mu * inv), bf16);
    }
    o[j] = y;
  }
  if (threadIdx.x == 0) {
    mean[r] = mu;
    rstd[r] = rs;
  }
}

// dx, a block per row (as row_forward_kernel): dx_kernel's formulas.
template <int V>
__global__ void row_dx_kernel(int64_t dim, const float* x, const float* gamma, const float* mean, const float* rstd,
                              const float* dout, const float* dout2, float* dx, const float* residual) {
  const int64_t r = blockIdx.x, n = dim / V;
  const auto* res = residual != nullptr ? reinterpret_cast<const Floats<V>*>(residual + r * dim) : nullptr;
  const auto* xr = reinterpret_cast<const Floats<V>*>(x + r * dim);
  const auto* dr = reinterpret_cast<const Floats<V>*>(dout + r * dim);
  const auto* dr2 = dout2 != nullptr ? reinterpret_cast<const Floats<V>*>(dout2 + r * dim) : nullptr;
  const auto* g = reinterpret_cast<const Floats<V>*>(gamma);
  auto* d = reinterpret_cast<Floats<V>*>(dx + r * dim);
  const float mu = mean[r], rs = rstd[r];
  // The output gradient's vector j: dout, or dout + dout2.
  auto grad = [&](int64_t j) {
    Floats<V> v = dr[j];
    if (dr2 != nullptr) {
      const Floats<V> w = dr2[j];
#pragma unroll
      for (int k = 0; k < V; ++k) v.v[k] += w.v[k];
    }
    return v;
  };
  float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const Floats<V> a = xr[j], gg = g[j], dy = grad(j);
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float xhat = (a.v[k] - mu) * rs;
      const float dxhat = dy.v[k] * gg.v[k];
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * xhat;
    }
  }
  const float mean_dxhat = block_sum(sum_dxhat) / static_cast<float>(dim);
  const float mean_dxhat_xhat = block_sum(sum_dxhat_xhat) / static_cast<float>(dim);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const Floats<V> a = xr[j], gg = g[j], dy = grad(j);
    Floats<V> y;
#pragma unroll
    for (int k = 0; k < V; ++k) {
      const float xhat = (a.v[k] - mu) * rs;
      y.v[k] = rs * (dy.v[k] * gg.v[k] - mean_dxhat - xhat * mean_dxhat_xhat);
    }
    if (res != nullptr) {
      const Floats<V> a = res[j];
#pragma unroll
      for (int k = 0; k < V; ++k) y.v[k] = __fadd_rn(a.v[k], y.v[k]);  // add's rounding, no FMA
    }
    d[j] = y;
  }
}

// dgamma and dbeta in ops::cpu::layer_norm_backward_params's order: pieces of 256 rows (its
// kRowsPerPiece), each summed row by row, dgamma as fma(dout, xhat, sum) (the CPU's std::fma), then
// the pieces in order. Block (piece, 32 columns) -> partials [pieces, 2, dim].
constexpr int64_t kPieceRows = 256;
__global__ void __launch_bounds__(kOrderedSumThreads)
    param_pieces_kernel(int64_t rows, int64_t dim, const float* x, const float* mean, const float* rstd,
                        const float* dout, const float* dout2, float* partials) {
  const int64_t col = static_cast<int64_t>(blockIdx.y) * 32 + threadIdx.x % 32;
  const int64_t column = col < dim ? col : dim - 1;  // for the loads of lanes past the last column
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kPieceRows;
  const int64_t end = rows < begin + kPieceRows ? rows : begin + kPieceRows;
  float sums[2];
  ordered_sum<2>(
      begin, end, col < dim,
      [&](int64_t r, float(&v)[2]) {
        v[0] = output_grad(dout, dout2, r * dim + column);
        v[1] = (x[r * dim + column] - mean[r]) * rstd[r];  // xhat
      },
      [](float(&acc)[2], const float(&e)[2]) {
        acc[0] = __fmaf_rn(e[0], e[1], acc[0]);
        acc[1] = __fadd_rn(acc[1], e[0]);
      },
      sums);
  if (threadIdx.x < 32 && col < dim) {
    partials[(blockIdx.x * 2) * dim + col] = sums[0];
    partials[(blockIdx.x * 2 + 1) * dim + col] = sums[1];
  }
}

// dim bounded by the parameter kernel's grid (a block per 32 columns).
void check_dim(int64_t dim, const char* what) {
  if (dim <= 0 || (dim + 31) / 32 > 65535)
    throw Error(std::string(what) + ": dim " + std::to_string(dim) + " must be in [1, 2097120]");
}

// Whether every row of these [rows, dim] arrays (and the [dim] ones) can be read 4 floats at a time.
bool vectorizable(int64_t dim, std::initializer_list<const float*> pointers) {
  if (dim % 4 != 0) return false;
  for (const float* p : pointers)
    if (p != nullptr && !aligned(p, 16)) return false;
  return true;
}

void check_rows(int64_t rows, int64_t dim, const char* what) {
  if (rows < 0) throw Error(std::string(what) + ": negative row count " + std::to_string(rows));
  if (dim > kMaxWarpDim && rows >= (int64_t{1} << 31))
    throw Error(std::string(what) + ": " + std::to_string(rows) + " rows are too many for one launch");
}

}  // namespace

void layer_norm_forward(int64_t rows, int64_t dim, float eps, const float* x, const float* gamma, const float* beta,
                        bool bf16_out, float* out, float* mean, float* rstd, cudaStream_t stream) {
  check_dim(dim, "layer_norm_forward");
  check_rows(rows, dim, "layer_norm_forward");
  if (rows == 0) return;
  const unsigned blocks = static_cast<unsigned>(rows);
  if (dim <= kMaxWarpDim) {
    forward_kernel<<<blocks_for(rows, kWarps), kWarps * 32, 0, stream>>>(rows, static_cast<int>(dim), eps, x, gamma,
                                                                          beta, bf16_out, out, mean, rstd);
  } else if (vectorizable(dim, {x, gamma, beta, out})) {
    row_forward_kernel<4><<<blocks, row_threads(dim / 4, kMaxRowThreads), 0, stream>>>(dim, eps, x, gamma, beta,
                                                                                        bf16_out, out, mean, rstd);
  } else {
    row_forward_kernel<1><<<blocks, row_threads(dim, kMaxRowThreads), 0, stream>>>(dim, eps, x, gamma, beta, bf16_out,
                                                                                    out, mean, rstd);
  }
  check_launch("layer_norm_forward");
}

int64_t layer_norm_backward_workspace(int64_t rows, int64_t dim) { return piece_count(rows, kPieceRows) * 2 * dim; }

void layer_norm_backward_dx(int64_t rows, int64_t dim, const float* x, const float* gamma, const float* mean,
                            const float* rstd, const float* dout, const float* dout2, float* dx, cudaStream_t stream,
                            const float* residual) {
  check_dim(dim, "layer_norm_backward");
  check_rows(rows, dim, "layer_norm_backward");
  if (rows == 0) return;
  const unsigned blocks = static_cast<unsigned>(rows);
  if (dim <= kMaxWarpDim) {
    dx_kernel<<<blocks_for(rows, kWarps), kWarps * 32, 0, stream>>>(rows, static_cast<int>(dim), x, gamma, mean, rstd,
                                                                    dout, dout2, dx, residual);
  } else if (vectorizable(dim, {x, gamma, dout, dout2, dx, residual})) {
    row_dx_kernel<4><<<blocks, row_threads(dim / 4, kMaxRowThreads), 0, stream>>>(dim, x, gamma, mean, rstd, dout,
                                                                                   dout2, dx, residual);
  } else {
    row_dx_kernel<1><<<blocks, row_threads(dim, kMaxRowThreads), 0, stream>>>(dim, x, gamma, mean, rstd, dout, dout2,
                                                                               dx, residual);
  }
  check_launch("layer_norm_backward");
}

void layer_norm_backward_params(int64_t rows, int64_t dim, const float* x, const float* mean, const float* rstd,
                                const float* dout, const float* dout2, float* dgamma, float* dbeta, float* workspace,
                                cudaStream_t stream) {
  check_dim(dim, "layer_norm_backward");
  check_rows(rows, dim, "layer_norm_backward");
  if (rows == 0) {
    FP8KIT_CUDA_CHECK(cudaMemsetAsync(dgamma, 0, dim * sizeof(float), stream));
    FP8KIT_CUDA_CHECK(cudaMemsetAsync(dbeta, 0, dim * sizeof(float), stream));
    return;
  }
  const int64_t pieces = piece_count(rows, kPieceRows);
  if (pieces >= (int64_t{1} << 31))
    throw Error("layer_norm_backward: " + std::to_string(rows) + " rows are too many for one launch");
  param_pieces_kernel<<<dim3(static_cast<unsigned>(pieces), blocks_for(dim, 32)), kOrderedSumThreads, 0, stream>>>(
      rows, dim, x, mean, rstd, dout, dout2, workspace);
  check_launch("layer_norm_backward");
  add_pieces<2>(pieces, dim, workspace, {{dgamma, dbeta}}, stream);
}

void layer_norm_backward(int64_t rows, int64_t dim, const float* x, const float* gamma, const float* mean,
                         const float* rstd, const float* dout, const float* dout2, float* dx, float* dgamma,
                         float* dbeta, float* workspace, cudaStream_t stream) {
  layer_norm_backward_dx(rows, dim, x, gamma, mean, rstd, dout, dout2, dx, stream);
  layer_norm_backward_params(rows, dim, x, mean, rstd, dout, dout2, dgamma, dbeta, workspace, stream);
}

}  // namespace fp8kit::cuda
