// Kernels of gemm_scales.h: element-wise, one thread per output element (these tensors are small or
// read once; their time is the GEMM's to hide).
#include "ops/cuda/gemm_scales.h"

#include <algorithm>
#include <string>

#include "base/error.h"
#include "ops/cuda/fp8_cast.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 256;

unsigned blocks_of(int64_t n) { return static_cast<unsigned>(std::clamp<int64_t>((n + kThreads - 1) / kThreads, 1, 65536)); }

__global__ void transpose_kernel(const float* in, int64_t rows, int64_t cols, float* out) {
  const int64_t n = rows * cols;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t c = i / rows, r = i % rows;  // out[c, r]: consecutive threads write consecutive floats
    out[i] = in[r * cols + c];
  }
}

__global__ void scale_outer_kernel(const float* acc, int64_t m, int64_t n, const float* a_scale, const float* b_scale,
                                   const uint16_t* bias, bool accumulate, void* y, bool bf16) {
  const int64_t total = m * n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / n, c = i % n;
    float v = a_scale != nullptr ? __fmul_rn(__fmul_rn(a_scale[r], b_scale[c]), acc[i]) : acc[i];
    if (bias != nullptr) v = __fadd_rn(v, bf16_to_float(bias[c]));
    if (bf16) {
      uint16_t* out = static_cast<uint16_t*>(y);
      if (accumulate) v = __fadd_rn(v, bf16_to_float(out[i]));
      out[i] = float_to_bf16(v);
    } else {
      float* out = static_cast<float*>(y);
      if (accumulate) v = __fadd_rn(v, out[i]);
      out[i] = v;
    }
  }
}

__global__ void add_scaled_slice_kernel(const float* partial, int64_t m, int64_t n, const float* a_scale,
                                        const float* b_scale, int64_t b_rows, int64_t b_stride, float* acc) {
  const int64_t total = m * n;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / n, c = i % n;
    const float scale = __fmul_rn(a_scale[r], b_scale[c / b_rows * b_stride]);
    acc[i] = __fadd_rn(acc[i], __fmul_rn(partial[i], scale));
  }
}

__global__ void broadcast_kernel(const float* scale, int64_t count, float* out) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = *scale;
}

}  // namespace

void broadcast_scale(const float* scale, int64_t count, float* out, cudaStream_t stream) {
  if (count == 0) return;
  broadcast_kernel<<<blocks_of(count), kThreads, 0, stream>>>(scale, count, out);
  check_launch("broadcast_scale");
}

void add_scaled_slice(const float* partial, int64_t m, int64_t n, const float* a_scale, const float* b_scale,
                      int64_t b_rows, int64_t b_stride, float* acc, cudaStream_t stream) {
  if (m * n == 0) return;
  add_scaled_slice_kernel<<<blocks_of(m * n), kThreads, 0, stream>>>(partial, m, n, a_scale, b_scale, b_rows, b_stride, acc);
  check_launch("add_scaled_slice");
}

void transpose_scales(const float* in, int64_t rows, int64_t cols, float* out, cudaStream_t stream) {
  if (rows * cols == 0) return;
  transpose_kernel<<<blocks_of(rows * cols), kThreads, 0, stream>>>(in, rows, cols, out);
  check_launch("transpose_scales");
}

void scale_outer(const float* acc, int64_t m, int64_t n, const float* a_scale, const float* b_scale,
                 const uint16_t* bias, bool accumulate, void* y, DType y_type, cudaStream_t stream) {
  if (y_type != DType::F32 && y_type != DType::Bf16)
    throw Error("scale_outer: y must be f32 or bf16, got " + std::string(name(y_type)));
  if (m * n == 0) return;
  scale_outer_kernel<<<blocks_of(m * n), kThreads, 0, stream>>>(acc, m, n, a_scale, b_scale, bias, accumulate, y,
                                                                y_type == DType::Bf16);
  check_launch("scale_outer");
}

}  // namespace fp8kit::cuda
