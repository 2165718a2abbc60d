// Element-wise kernels of the training step (one thread per element unless said otherwise; the bias
// gradient sums in nn::Linear's order, ops/cuda/ordered_sum.cuh).
#include "ops/cuda/elementwise.h"

#include <string>

#include "base/error.h"
#include "ops/cuda/check.h"
#include "ops/cuda/ordered_sum.cuh"
#include "ops/cuda/round.cuh"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void add_kernel(const float* a, const float* b, bool bf16, float* out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = maybe_bf16(a[i] + b[i], bf16);
}

__global__ void add3_kernel(const float* a, const float* b, const float* c, float* out, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i] + c[i];
}

__global__ void bias_activation_kernel(float* y, const float* bias, int64_t rows, int64_t cols, bool relu, bool bf16) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * cols) return;
  const float b = bias[i % cols];
  const float v = bf16 ? round_bf16(round_bf16(y[i]) + round_bf16(b)) : y[i] + b;
  y[i] = relu ? fmaxf(v, 0.0f) : v;
}

// nn::Linear's bias gradient order: pieces of 512 rows (its kRowsPerPiece), each summed row by row,
// then the pieces in order. Block (piece, 32 columns) writes the masked gradient g as it fetches it.
constexpr int64_t kBiasPieceRows = 512;
__global__ void __launch_bounds__(kOrderedSumThreads)
    bias_pieces_kernel(const float* dy, const float* y, int64_t rows, int64_t cols, bool relu, float* g,
                       float* partials) {
  const int64_t col = static_cast<int64_t>(blockIdx.y) * 32 + threadIdx.x % 32;
  const int64_t column = col < cols ? col : cols - 1;  // for the loads of lanes past the last column
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * kBiasPieceRows;
  const int64_t end = rows < begin + kBiasPieceRows ? rows : begin + kBiasPieceRows;
  float sum[1];
  ordered_sum<1>(
      begin, end, col < cols,
      [&](int64_t r, float(&v)[1], bool real) {
        const int64_t i = r * cols + column;
        v[0] = relu && !(y[i] > 0.0f) ? 0.0f : dy[i];
        if (real) g[i] = v[0];
      },
      [](float(&acc)[1], const float(&e)[1]) { acc[0] += e[0]; }, sum);
  if (threadIdx.x < 32 && col < cols) partials[blockIdx.x * cols + col] = sum[0];
}

__global__ void spread_kernel(const float* x, int64_t count, int64_t stride, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) out[i * stride] = x[i];
}

template <typename Out>
__global__ void transpose_kernel(const float* x, int64_t rows, int64_t cols, Out* out) {
  __shared__ float tile[32][33];
  const int64_t c0 = static_cast<int64_t>(blockIdx.x) * 32, r0 = static_cast<int64_t>(blockIdx.y) * 32;
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int64_t r = r0 + k, c = c0 + threadIdx.x;
    if (r < rows && c < cols) tile[k][threadIdx.x] = x[r * cols + c];
  }
  __syncthreads();
  for (int k = threadIdx.y; k < 32; k += blockDim.y) {
    const int64_t c = c0 + k, r = r0 + threadIdx.x;
    if (r < rows && c < cols) {
      const float v = tile[threadIdx.x][k];
      if constexpr (sizeof(Out) == 2) {
        out[c * rows + r] = float_to_bf16(v);
      } else {
        out[c * rows + r] = v;
      }
    }
  }
}

__global__ void advance_kernel(uint64_t* counter) { *counter += 1; }

}  // namespace

void add(const float* a, const float* b, bool bf16, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  add_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(a, b, bf16, out, n);
  check_launch("add");
}

void add3(const float* a, const float* b, const float* c, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  add3_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(a, b, c, out, n);
  check_launch("add3");
}

void bias_activation(float* y, const float* bias, int64_t rows, int64_t cols, bool relu, bool bf16,
                     cudaStream_t stream) {
  if (rows * cols == 0) return;
  bias_activation_kernel<<<blocks_for(rows * cols, kThreads), kThreads, 0, stream>>>(y, bias, rows, cols, relu, bf16);
  check_launch("bias_activation");
}

int64_t bias_backward_workspace(int64_t rows, int64_t cols) { return piece_count(rows, kBiasPieceRows) * cols; }

void bias_backward(const float* dy, const float* y, int64_t rows, int64_t cols, bool relu, float* g,
                   float* bias_grad, float* workspace, cudaStream_t stream) {
  if (rows < 0 || cols < 0) throw Error("bias_backward: negative shape");
  if (cols == 0) return;
  if (rows == 0) {
    FP8KIT_CUDA_CHECK(cudaMemsetAsync(bias_grad, 0, cols * sizeof(float), stream));
    return;
  }
  const int64_t pieces = piece_count(rows, kBiasPieceRows);
  if (pieces >= (int64_t{1} << 31) || (cols + 31) / 32 > 65535)
    throw Error("bias_backward: " + std::to_string(rows) + " x " + std::to_string(cols) + " is too large");
  const dim3 grid(static_cast<unsigned>(pieces), blocks_for(cols, 32));
  bias_pieces_kernel<<<grid, kOrderedSumThreads, 0, stream>>>(dy, y, rows, cols, relu, g, workspace);
  check_launch("bias_backward");
  add_pieces<1>(pieces, cols, workspace, {{bias_grad}}, stream);
}

void transpose(const float* x, int64_t rows, int64_t cols, DType out_type, void* out, cudaStream_t stream) {
  if (rows * cols == 0) return;
  if (rows > int64_t{65535} * 32 || cols >= (int64_t{1} << 31))  // grid.y limit
    throw Error("transpose: " + std::to_string(rows) + " x " + std::to_string(cols) + " is too large");
  const dim3 grid(blocks_for(cols, 32), blocks_for(rows, 32)), block(32, 8);
  if (out_type == DType::Bf16) {
    transpose_kernel<<<grid, block, 0, stream>>>(x, rows, cols, static_cast<uint16_t*>(out));
  } else if (out_type == DType::F32) {
    transpose_kernel<<<grid, block, 0, stream>>>(x, rows, cols, static_cast<float*>(out));
  } else {
    throw Error("transpose: the output type must be F32 or Bf16");
  }
  check_launch("transpose");
}

void spread(const float* x, int64_t count, int64_t stride, float* out, cudaStream_t stream) {
  if (count == 0) return;
  spread_kernel<<<blocks_for(count, kThreads), kThreads, 0, stream>>>(x, count, stride, out);
  check_launch("spread");
}

void advance_counter(uint64_t* counter, cudaStream_t stream) {
  advance_kernel<<<1, 1, 0, stream>>>(counter);
  check_launch("advance_counter");
}

}  // namespace fp8kit::cuda
