// Element-wise kernels of the training step (one thread per element unless said otherwise; the bias
// gradient sums in the caller's piece order, ops/cuda/ordered_sum.cuh).
#include "ops/cuda/elementwise.h"

#include <algorithm>
#include <string>

#include "base/error.h"
#include "ops/cuda/aligned.h"
#include "ops/cuda/batch.cuh"
#include "ops/cuda/dropout.cuh"
#include "ops/cuda/linear_epilogue.h"
#include "ops/cuda/ordered_sum.cuh"
#include "ops/cuda/round.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void add_kernel(const float* a, const float* b, bool bf16, float* out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = maybe_bf16(a[i] + b[i], bf16);
}

// a + ((b + c) + d); a null c or d is left out of the sum.
__global__ void residual_gradient_kernel(const float* a, const float* b, const float* c, const float* d,
                                         DropoutArgs dropout, float* out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float s = b[i];
  if (c != nullptr) s += c[i];
  if (d != nullptr) s += d[i];
  out[i] = dropout.backward(a[i] + s, static_cast<uint32_t>(i));
}

// Up to kMaxOutputs LinearOutputs in one launch. A thread takes 4 consecutive columns of a row, so
// that the bias is indexed by column without a 64-bit division per element (one per element had held
// the kernel at half the copy bandwidth) and the accesses are 16 bytes wide where every row starts
// aligned (`vector`). An output's rows take per_row threads each (the power of 2 that covers the row's
// 4-column groups, at most a block's), so that a block holds kThreads / per_row rows and narrow
// outputs (the seed model's 32 columns) keep every thread busy; block (x, y) of an output takes
// groups [x per_row, (x + 1) per_row) of its rows [y kThreads / per_row, ...).
constexpr int kMaxOutputs = 4;
struct Output {
  float* y;
  const float* bias;
  int64_t rows, cols;
  int per_row;
  Activation activation;
  float* pre;
  DropoutArgs dropout;
  const float* residual;
  float* out;
  uint16_t* copy;
  bool write_y;
  bool vector;  // cols % 4 == 0, every f32 pointer 16-byte aligned and copy 8-byte aligned
};
using Outputs = LaunchBatch<Output, kMaxOutputs>;

// v[0 .. n) = x[0 .. n): one 16-byte load when vector (then n == 4).
__device__ __forceinline__ void load4(const float* x, int n, bool vector, float (&v)[4]) {
  if (vector) {
    const float4 q = *reinterpret_cast<const float4*>(x);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
    return;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = i < n ? x[i] : 0.0f;
}

__device__ __forceinline__ void store4(float* x, int n, bool vector, const float (&v)[4]) {
  if (vector) {
    *reinterpret_cast<float4*>(x) = make_float4(v[0], v[1], v[2], v[3]);
    return;
  }
#pragma unroll
  for (int i = 0; i < 4; ++i)
    if (i < n) x[i] = v[i];
}

__global__ void linear_outputs_kernel(const __grid_constant__ Outputs b, bool bf16) {
  const BatchTile at = b.tile(blockIdx.x);
  const Output& o = b.m[at.member];
  const int64_t row = at.y * (kThreads / o.per_row) + threadIdx.x / o.per_row;
  const int64_t col = 4 * (at.x * o.per_row + threadIdx.x % o.per_row);
  if (row >= o.rows || col >= o.cols) return;
  const int64_t first = row * o.cols + col;
  const int n = o.cols - col < 4 ? static_cast<int>(o.cols - col) : 4;
  const bool vector = o.vector && n == 4;
  float v[4];
  load4(o.y + first, n, vector, v);
  if (o.bias != nullptr) {
    float pre[4];
#pragma unroll
    for (int i = 0; i < 4; ++i)
      v[i] = linear_epilogue(v[i], i < n ? o.bias[col + i] : 0.0f, o.activation, bf16, pre + i);
    if (o.write_y) store4(o.y + first, n, vector, v);
    if (o.pre != nullptr) store4(o.pre + first, n, vector, pre);
  }
  if (o.copy != nullptr) {
    uint16_t h[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) h[i] = float_to_bf16(v[i]);
    if (vector) {
      *reinterpret_cast<uint2*>(o.copy + first) =
          make_uint2(h[0] | (static_cast<uint32_t>(h[1]) << 16), h[2] | (static_cast<uint32_t>(h[3]) << 16));
    } else {
#pragma unroll
      for (int i = 0; i < 4; ++i)
        if (i < n) o.copy[first + i] = h[i];
    }
  }
  if (o.out == nullptr) return;
  const DeviceDropoutMask mask = o.dropout.mask();
  float r[4] = {};
  if (o.residual != nullptr) load4(o.residual + first, n, vector, r);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float d = o.dropout.forward(v[i], static_cast<uint32_t>(first + i), bf16, mask);
    v[i] = o.residual != nullptr ? maybe_bf16(r[i] + d, bf16) : d;
  }
  store4(o.out + first, n, vector, v);
}

// The bias gradient in a PieceOrder: pieces of piece_rows rows, each summed row by row, then the
// pieces in order. Block (piece, 32 columns, tensor) writes the masked gradient g as it fetches it,
// and its sums to partials [pieces, tensors, cols] (add_pieces' layout). With one piece (rows <=
// piece_rows), `last` is set and the block writes the final 0 + sum itself (add_pieces' first and
// only addition) into the bias gradient: one launch fewer.
constexpr int kMaxBiasTensors = 4;
struct BiasTensors {
  struct One {
    const float* dy;
    EpilogueGradientArgs gradient;
    float* g;
    float* bias_grad;

    // What is loaded beside dy: the activation's y (dy itself, never read as one, without an
    // activation), so that the loads need no branch.
    __device__ const float* y() const { return gradient.activation != Activation::None ? gradient.y : dy; }
    // g at element i from the raw dy and y there, written out when asked.
    __device__ float term(float dy_i, float y_i, int64_t i, int64_t col, const DeviceDropoutMask& mask) const {
      const float e = gradient.with_y(dy_i, y_i, i, col, mask);
      if (g != nullptr) g[i] = e;
      return e;
    }
  } t[kMaxBiasTensors];
  int count;

  // Tensor `tensor`'s sum of a piece at column col: with one piece (`last`), the final 0 + sum
  // (add_pieces' first and only addition) into its bias gradient; else into partials.
  __device__ void store(int tensor, int64_t piece, int64_t cols, int64_t col, float sum, float* partials,
                        bool last) const {
    if (last) {
      t[tensor].bias_grad[col] = __fadd_rn(0.0f, sum);
    } else {
      partials[(piece * count + tensor) * cols + col] = sum;
    }
  }
};

__global__ void __launch_bounds__(kOrderedSumThreads)
    bias_pieces_kernel(const __grid_constant__ BiasTensors b, int64_t rows, int64_t cols, int64_t piece_rows,
                       float* partials, bool last) {
  const BiasTensors::One& p = b.t[blockIdx.z];
  const DeviceDropoutMask mask = p.gradient.dropout.mask();
  const int64_t col = static_cast<int64_t>(blockIdx.y) * 32 + threadIdx.x % 32;
  const int64_t column = col < cols ? col : cols - 1;  // for the loads of lanes past the last column
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * piece_rows;
  const int64_t end = rows < begin + piece_rows ? rows : begin + piece_rows;
  float sum[1];
  const float* y = p.y();
  ordered_sum_prepared<1, 2>(
      begin, end, col < cols,
      [&](int64_t r, float(&raw)[2]) {
        raw[0] = p.dy[r * cols + column];
        raw[1] = y[r * cols + column];
      },
      [&](int64_t r, const float(&raw)[2], float(&e)[1]) { e[0] = p.term(raw[0], raw[1], r * cols + col, col, mask); },
      [](float(&acc)[1], const float(&e)[1]) { acc[0] += e[0]; }, sum);
  if (threadIdx.x < 32 && col < cols) b.store(blockIdx.z, blockIdx.x, cols, col, sum[0], partials, last);
}

// The same sums for bias gradients with threads enough to fill the GPU on their own (pieces x
// columns x tensors of kColumnThreads and more: a Transformer's at 16384 rows): a thread per (piece,
// column) adds its column of the piece itself in row order, kColumnLoads rows' loads in flight at a
// time (a warp reads 128 contiguous bytes of each row). At 16384 rows (the GPT layer's; H100) it takes 182 us at 4096
// columns and 834 us at 16384 with GELU's backward, where the block above, whose warp 0 adds what 8
// warps fetch, took 210 and 1010 us.
constexpr int64_t kColumnThreads = 65536;
constexpr int kColumnLoads = 16;

__global__ void __launch_bounds__(kThreads)
    bias_columns_kernel(const __grid_constant__ BiasTensors b, int64_t rows, int64_t cols, int64_t piece_rows,
                        float* partials, bool last) {
  const BiasTensors::One& p = b.t[blockIdx.z];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (col >= cols) return;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * piece_rows;
  const int64_t end = rows < begin + piece_rows ? rows : begin + piece_rows;
  const DeviceDropoutMask mask = p.gradient.dropout.mask();
  const float* y = p.y();
  float sum = 0.0f;
  for (int64_t first = begin; first < end; first += kColumnLoads) {
    float raw[kColumnLoads][2];
#pragma unroll
    for (int k = 0; k < kColumnLoads; ++k) {  // rows past the end repeat the last one: no branches
      const int64_t i = (first + k < end ? first + k : end - 1) * cols + col;
      raw[k][0] = p.dy[i];
      raw[k][1] = y[i];
    }
#pragma unroll
    for (int k = 0; k < kColumnLoads; ++k) {
      if (first + k >= end) break;
      sum += p.term(raw[k][0], raw[k][1], (first + k) * cols + col, col, mask);
    }
  }
  b.store(blockIdx.z, blockIdx.y, cols, col, sum, partials, last);
}

__global__ void spread_kernel(const float* x, int64_t count, int64_t stride, float* out, float* zero) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= count) return;
  out[i * stride] = x[i];
  if (zero != nullptr) zero[i] = 0.0f;
}

// Up to kMaxTransposes matrices in one launch, 32 x 32 tiles through shared memory (coalesced both
// ways).
constexpr int kMaxTransposes = 16;
using Transposes = LaunchBatch<Transpose, kMaxTransposes>;

__global__ void __launch_bounds__(32 * 8) transpose_kernel(const __grid_constant__ Transposes b) {
  __shared__ float tile[32][33];
  const BatchTile at = b.tile(blockIdx.x);
  const Transpose& p = b.m[at.member];
  const int64_t c0 = at.x * 32, r0 = at.y * 32;
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int64_t r = r0 + k, c = c0 + threadIdx.x;
    if (r < p.rows && c < p.cols) tile[k][threadIdx.x] = p.x[r * p.cols + c];
  }
  __syncthreads();
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int64_t c = c0 + k, r = r0 + threadIdx.x;
    if (r < p.rows && c < p.cols) p.out[c * p.rows + r] = tile[threadIdx.x][k];
  }
}

void check_order(ops::PieceOrder order) {
  if (order.rows_per_piece <= 0)
    throw Error("bias_backward: rows_per_piece must be positive, got " + std::to_string(order.rows_per_piece));
}

}  // namespace

void add(const float* a, const float* b, bool bf16, float* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  add_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(a, b, bf16, out, n);
  check_launch("add");
}

void residual_gradient(const float* a, const float* b, const float* c, const float* d, const DropoutSite& dropout,
                       bool bf16, float* out, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  residual_gradient_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(
      a, b, c, d, dropout_args(dropout, bf16, "residual_gradient", n), out, n);
  check_launch("residual_gradient");
}

void linear_outputs(std::span<const LinearOutput> outputs, bool bf16, cudaStream_t stream) {
  for (size_t start = 0; start < outputs.size(); start += kMaxOutputs) {
    Outputs b{};
    const int count = static_cast<int>(std::min<size_t>(kMaxOutputs, outputs.size() - start));
    for (int t = 0; t < count; ++t) {
      const LinearOutput& o = outputs[start + t];
      const int64_t n = o.rows * o.cols;
      const std::string what = "linear_outputs: output " + std::to_string(start + t);
      if (o.rows < 0 || o.cols < 0 || n > int64_t{UINT32_MAX})
        throw Error(what + ": shape " + std::to_string(o.rows) + "x" + std::to_string(o.cols) +
                    " is negative or has 2^32 elements or more");
      if (n > 0 && o.y == nullptr) throw Error(what + ": y must be a device pointer");
      const bool vector = o.cols % 4 == 0 && aligned(o.y, 16) && aligned(o.pre, 16) && aligned(o.residual, 16) &&
                          aligned(o.out, 16) && aligned(o.copy, 8);
      const int64_t groups = (o.cols + 3) / 4;
      int per_row = 1;
      while (per_row < kThreads && per_row < groups) per_row *= 2;
      const int64_t rows_per_block = kThreads / per_row;
      b.add({o.y, o.bias, o.rows, o.cols, per_row, o.activation, o.pre,
             o.out != nullptr ? dropout_args(o.dropout, bf16, "linear_outputs", n) : DropoutArgs{}, o.residual, o.out,
             o.copy, o.write_y, vector},
            (groups + per_row - 1) / per_row, (o.rows + rows_per_block - 1) / rows_per_block);
    }
    const unsigned blocks = b.blocks("linear_outputs");
    if (blocks == 0) continue;
    linear_outputs_kernel<<<blocks, kThreads, 0, stream>>>(b, bf16);
    check_launch("linear_outputs");
  }
}

int64_t bias_backward_workspace(int64_t rows, int64_t cols, ops::PieceOrder order, int64_t tensors) {
  check_order(order);
  return order.pieces(rows) * tensors * cols;
}

void bias_backward(std::span<const BiasBackward> tensors, int64_t rows, int64_t cols, ops::PieceOrder order,
                   float* workspace, cudaStream_t stream) {
  if (rows < 0 || cols < 0) throw Error("bias_backward: negative shape");
  check_order(order);
  if (tensors.empty() || tensors.size() > kMaxBiasTensors)
    throw Error("bias_backward: 1 to 4 tensors per call, got " + std::to_string(tensors.size()));
  if (cols == 0) return;
  if (rows == 0) {
    for (const BiasBackward& t : tensors)
      FP8KIT_CUDA_CHECK(cudaMemsetAsync(t.bias_grad, 0, cols * sizeof(float), stream));
    return;
  }
  const int64_t pieces = order.pieces(rows);
  BiasTensors b{};
  b.count = static_cast<int>(tensors.size());
  for (int i = 0; i < b.count; ++i) {
    const BiasBackward& t = tensors[i];
    if (t.gradient.swiglu != ops::SwiGluPart::None)
      throw Error("bias_backward: SwiGLU's gradient has no bias sum here");
    b.t[i] = {t.dy, epilogue_gradient_args(t.gradient, rows, cols, "bias_backward"), t.g, t.bias_grad};
  }
  if (pieces >= (int64_t{1} << 31) || (cols + 31) / 32 > 65535)
    throw Error("bias_backward: " + std::to_string(rows) + " x " + std::to_string(cols) + " is too large");
  const bool last = pieces == 1;
  if (pieces * cols * b.count >= kColumnThreads && pieces <= 65535) {
    const dim3 grid(blocks_for(cols, kThreads), static_cast<unsigned>(pieces), static_cast<unsigned>(b.count));
    bias_columns_kernel<<<grid, kThreads, 0, stream>>>(b, rows, cols, order.rows_per_piece, workspace, last);
  } else {
    const dim3 grid(static_cast<unsigned>(pieces), blocks_for(cols, 32), static_cast<unsigned>(b.count));
    bias_pieces_kernel<<<grid, kOrderedSumThreads, 0, stream>>>(b, rows, cols, order.rows_per_piece, workspace, last);
  }
  check_launch("bias_backward");
  if (last) return;
  const auto& t = b.t;
  switch (b.count) {
    case 1: add_pieces<1>(pieces, cols, workspace, {{t[0].bias_grad}}, stream); break;
    case 2: add_pieces<2>(pieces, cols, workspace, {{t[0].bias_grad, t[1].bias_grad}}, stream); break;
    case 3: add_pieces<3>(pieces, cols, workspace, {{t[0].bias_grad, t[1].bias_grad, t[2].bias_grad}}, stream); break;
    default:
      add_pieces<4>(pieces, cols, workspace, {{t[0].bias_grad, t[1].bias_grad, t[2].bias_grad, t[3].bias_grad}},
                    stream);
  }
}

void transpose(std::span<const Transpose> matrices, cudaStream_t stream) {
  for (size_t start = 0; start < matrices.size(); start += kMaxTransposes) {
    Transposes b{};
    const int count = static_cast<int>(std::min<size_t>(kMaxTransposes, matrices.size() - start));
    for (int t = 0; t < count; ++t) {
      const Transpose& m = matrices[start + t];
      const std::string what = "transpose: matrix " + std::to_string(start + t) + " (" + std::to_string(m.rows) +
                               "x" + std::to_string(m.cols) + ")";
      if (m.rows < 0 || m.cols < 0) throw Error(what + " has a negative shape");
      if (m.rows * m.cols > 0 && (m.x == nullptr || m.out == nullptr)) throw Error(what + ": x or out is null");
      b.add_matrix(m, m.rows, m.cols, 32);
    }
    const unsigned blocks = b.blocks("transpose");
    if (blocks == 0) continue;
    transpose_kernel<<<blocks, dim3(32, 8), 0, stream>>>(b);
    check_launch("transpose");
  }
}

void spread(const float* x, int64_t count, int64_t stride, float* out, cudaStream_t stream, float* zero) {
  if (count == 0) return;
  spread_kernel<<<blocks_for(count, kThreads), kThreads, 0, stream>>>(x, count, stride, out, zero);
  check_launch("spread");
}

namespace {
__global__ void increment_kernel(uint64_t* counter) { ++*counter; }
}  // namespace

void increment(uint64_t* counter, cudaStream_t stream) {
  increment_kernel<<<1, 1, 0, stream>>>(counter);
  FP8KIT_CUDA_CHECK(cudaGetLastError());
}

}  // namespace fp8kit::cuda
