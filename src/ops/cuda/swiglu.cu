// SwiGLU kernels: the CPU core's operations in its order, each rounded explicitly (no contraction),
// with the accurate expf.
#include "ops/cuda/swiglu.h"

#include <string>

#include "base/error.h"
#include "ops/cuda/activation_out.cuh"
#include "ops/cuda/aligned.h"
#include "ops/cuda/round.cuh"
#include "ops/cuda/swiglu.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 256;

// The training kernels' threads take 4 elements each, as one 16-byte load per operand where every
// pointer allows it (these f32 passes over [rows, ffn] are bound by memory), else one element.
template <int Width>
__device__ __forceinline__ void load(const float* p, int64_t at, float (&v)[Width]) {
  if constexpr (Width == 4) {
    const float4 q = *reinterpret_cast<const float4*>(p + at);
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  } else {
    v[0] = p[at];
  }
}
template <int Width>
__device__ __forceinline__ void store(float* p, int64_t at, const float (&v)[Width]) {
  if constexpr (Width == 4) {
    *reinterpret_cast<float4*>(p + at) = make_float4(v[0], v[1], v[2], v[3]);
  } else {
    p[at] = v[0];
  }
}

// Thread t's elements [Width t, Width t + Width) of n, or the scalar rest at the end: f(at, width).
template <int Width, typename F>
__device__ __forceinline__ void elements(int64_t n, F&& f) {
  const int64_t at = Width * (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x);
  if (at + Width <= n) {
    f.template operator()<Width>(at);
  } else {
    for (int64_t i = at; i < n; ++i) f.template operator()<1>(i);
  }
}

template <int Width>
__global__ void forward_kernel(int64_t n, const float* gate, const float* up, bool bf16, float* out) {
  elements<Width>(n, [&]<int W>(int64_t at) {
    float g[W], u[W], y[W];
    load(gate, at, g);
    load(up, at, u);
#pragma unroll
    for (int k = 0; k < W; ++k) y[k] = maybe_bf16(swiglu_value(g[k], u[k]), bf16);
    store(out, at, y);
  });
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

template <int Width>
__global__ void backward_kernel(int64_t n, const float* gate, const float* up, const float* dout, float* dgate,
                                float* dup) {
  elements<Width>(n, [&]<int W>(int64_t at) {
    float g[W], u[W], d[W], dg[W], du[W];
    load(gate, at, g);
    load(up, at, u);
    load(dout, at, d);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      dg[k] = swiglu_gate_gradient(g[k], u[k], d[k]);
      du[k] = swiglu_up_gradient(g[k], d[k]);
    }
    store(dgate, at, dg);
    store(dup, at, du);
  });
}

// Launches kernel<4> over quads of n where every pointer is 16-byte aligned, else kernel<1>.
template <typename Kernel4, typename Kernel1, typename... Args>
void launch_elements(Kernel4 four, Kernel1 one, int64_t n, bool vectors, cudaStream_t stream, Args... args) {
  if (vectors) {
    four<<<blocks_for((n + 3) / 4, kThreads), kThreads, 0, stream>>>(n, args...);
  } else {
    one<<<blocks_for(n, kThreads), kThreads, 0, stream>>>(n, args...);
  }
}

void check_count(int64_t n, const char* what) {
  if (n >= (int64_t{1} << 31) * kThreads)
    throw Error(std::string(what) + ": " + std::to_string(n) + " elements are too many for one launch");
}

}  // namespace

void swiglu_forward(int64_t n, const float* gate, const float* up, bool bf16, float* out, cudaStream_t stream) {
  if (n == 0) return;
  check_count(n, "swiglu_forward");
  launch_elements(forward_kernel<4>, forward_kernel<1>, n, aligned(gate, 16) && aligned(up, 16) && aligned(out, 16),
                  stream, gate, up, bf16, out);
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
  const bool vectors = aligned(gate, 16) && aligned(up, 16) && aligned(dout, 16) && aligned(dgate, 16) && aligned(dup, 16);
  launch_elements(backward_kernel<4>, backward_kernel<1>, n, vectors, stream, gate, up, dout, dgate, dup);
  check_launch("swiglu_backward");
}

}  // namespace fp8kit::cuda
