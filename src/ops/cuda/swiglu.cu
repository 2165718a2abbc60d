// SwiGLU kernels: a thread per element, the CPU core's operations in its order, each rounded
// explicitly (no contraction), with the accurate expf.
#include "ops/cuda/swiglu.h"

#include <string>

#include "base/error.h"
#include "ops/cuda/activation_out.cuh"
#include "ops/cuda/aligned.h"
#include "ops/cuda/round.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 256;

// ops::cpu::swiglu_value's operations in its order.
__device__ __forceinline__ float swiglu_value(float g, float u) {
  return __fmul_rn(__fdiv_rn(g, __fadd_rn(1.0f, expf(-g))), u);
}

__global__ void forward_kernel(int64_t n, const float* gate, const float* up, bool bf16, float* out) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  out[i] = maybe_bf16(swiglu_value(gate[i], up[i]), bf16);
}

// ops::swiglu: a row's thread t holds its vectors t, t + count, ... (Chunks of them; RowThread) of the
// row's results until the row's amax is known.
template <int V, int Chunks, int Blocks>
__global__ void __launch_bounds__(kRowKernelThreads) fused_kernel(int64_t ffn, const uint16_t* gate_up,
                                                                  ActivationOutArgs out) {
  wait_for_prior_grids();
  allow_dependent_launch();
  const RowThread t = row_thread<Blocks>();
  const int64_t r = t.row, n = ffn / V;
  const float preset = tensor_scale(out);
  const auto* gate = reinterpret_cast<const Bf16s<V>*>(gate_up + r * 2 * ffn);
  const auto* up = reinterpret_cast<const Bf16s<V>*>(gate_up + r * 2 * ffn + ffn);
  Bf16s<V> g[Chunks] = {}, u[Chunks] = {};
#pragma unroll
  for (int k = 0; k < Chunks; ++k) {
    const int64_t j = t.index + k * t.count;
    if (j < n) g[k] = gate[j], u[k] = up[j];
  }
  uint32_t amax = 0;
#pragma unroll
  for (int k = 0; k < Chunks; ++k) {
    if (t.index + k * t.count >= n) continue;
#pragma unroll
    for (int i = 0; i < V; ++i)
      g[k].h[i] = float_to_bf16(swiglu_value(bf16_to_float(g[k].h[i]), bf16_to_float(u[k].h[i])));
    amax = raise_amax(amax, g[k]);
  }
  const float scale = activation_scale<Blocks>(out, t, amax, preset);
#pragma unroll
  for (int k = 0; k < Chunks; ++k) {
    const int64_t j = t.index + k * t.count;
    if (j < n) store_activation<V>(out, r * ffn + j * V, g[k], scale);
  }
  if (out.kind == OutKind::PerRow) row_done<Blocks>();  // only the row's amax was read across the cluster
}

__global__ void backward_kernel(int64_t n, const float* gate, const float* up, const float* dout, float* dgate,
                                float* dup) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float g = gate[i], u = up[i], d = dout[i];
  const float denominator = __fadd_rn(1.0f, expf(-g));
  const float sig = __fdiv_rn(1.0f, denominator), silu = __fdiv_rn(g, denominator);
  const float dsilu = __fmul_rn(sig, __fadd_rn(1.0f, __fmul_rn(g, __fsub_rn(1.0f, sig))));
  dgate[i] = __fmul_rn(__fmul_rn(d, u), dsilu);
  dup[i] = __fmul_rn(d, silu);
}

void check_count(int64_t n, const char* what) {
  if (n >= (int64_t{1} << 31) * kThreads)
    throw Error(std::string(what) + ": " + std::to_string(n) + " elements are too many for one launch");
}

}  // namespace

void swiglu_forward(int64_t n, const float* gate, const float* up, bool bf16, float* out, cudaStream_t stream) {
  if (n == 0) return;
  check_count(n, "swiglu_forward");
  forward_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(n, gate, up, bf16, out);
  check_launch("swiglu_forward");
}

void swiglu(int64_t rows, int64_t ffn, const uint16_t* gate_up, const ActivationOutArgs& out, cudaStream_t stream) {
  if (rows < 0 || ffn <= 0 || rows >= (int64_t{1} << 31) || ffn > kRowKernelMaxCols)
    throw Error("swiglu: unsupported shape [" + std::to_string(rows) + ", 2 x " + std::to_string(ffn) +
                "] (the GPU kernel holds rows of up to " + std::to_string(kRowKernelMaxCols) + " results)");
  if (rows == 0) {
    finish_empty_activation(out, stream);
    return;
  }
  const bool vector = ffn % 8 == 0 && aligned(gate_up, 16) && aligned(out.bf16, 16) && aligned(out.codes, 8);
  // No sum to keep in order: at few rows, 1024 threads share a row (16 values each at ffn 14336).
  launch_row_kernel(rows, ffn, vector, 1024, [&](auto v, auto chunks, auto blocks, int threads) {
    launch_rows(fused_kernel<decltype(v)::value, decltype(chunks)::value, decltype(blocks)::value>, rows, blocks,
                threads, stream, ffn, gate_up, out);
  });
  check_launch("swiglu");
}

void swiglu_backward(int64_t n, const float* gate, const float* up, const float* dout, float* dgate, float* dup,
                     cudaStream_t stream) {
  if (n == 0) return;
  check_count(n, "swiglu_backward");
  backward_kernel<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(n, gate, up, dout, dgate, dup);
  check_launch("swiglu_backward");
}

}  // namespace fp8kit::cuda
