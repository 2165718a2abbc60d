// The GELU inference kernel: ops::gelu's formula (ops/activation.h, the same text as the CPU's) on
// the row kernels' layout, as ops::swiglu's fused kernel.
#include "ops/cuda/gelu.h"

#include <string>

#include "base/error.h"
#include "ops/activation.h"
#include "ops/cuda/activation_out.cuh"
#include "ops/cuda/aligned.h"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

template <int V, int Chunks, int Blocks>
__global__ void __launch_bounds__(kRowKernelThreads) gelu_kernel(int64_t cols, const uint16_t* x,
                                                                 ActivationOutArgs out) {
  const RowThread t = row_thread<Blocks>();
  const int64_t r = t.row, n = cols / V;
  const float preset = tensor_scale(out);
  const auto* row = reinterpret_cast<const Bf16s<V>*>(x + r * cols);
  Bf16s<V> y[Chunks] = {};
#pragma unroll
  for (int k = 0; k < Chunks; ++k) {
    const int64_t j = t.index + k * t.count;
    if (j < n) y[k] = row[j];
  }
  uint32_t amax = 0;
#pragma unroll
  for (int k = 0; k < Chunks; ++k) {
    if (t.index + k * t.count >= n) continue;
#pragma unroll
    for (int i = 0; i < V; ++i) y[k].h[i] = float_to_bf16(ops::gelu(bf16_to_float(y[k].h[i])));
    amax = raise_amax(amax, y[k]);
  }
  const float scale = activation_scale<Blocks>(out, t, amax, preset);
#pragma unroll
  for (int k = 0; k < Chunks; ++k) {
    const int64_t j = t.index + k * t.count;
    if (j < n) store_activation<V>(out, r * cols + j * V, y[k], scale);
  }
  if (out.kind == OutKind::PerRow) row_done<Blocks>();
}

}  // namespace

void gelu(int64_t rows, int64_t cols, const uint16_t* x, const ActivationOutArgs& out, cudaStream_t stream) {
  if (rows < 0 || cols <= 0 || rows >= (int64_t{1} << 31) || cols > kRowKernelMaxCols)
    throw Error("gelu: unsupported shape [" + std::to_string(rows) + ", " + std::to_string(cols) +
                "] (the GPU kernel holds rows of up to " + std::to_string(kRowKernelMaxCols) + " results)");
  if (rows == 0) {
    finish_empty_activation(out, stream);
    return;
  }
  const bool vector = cols % 8 == 0 && aligned(x, 16) && aligned(out.bf16, 16) && aligned(out.codes, 8);
  launch_row_kernel(rows, cols, vector, 1024, [&](auto v, auto chunks, auto blocks, int threads) {
    launch_rows(gelu_kernel<decltype(v)::value, decltype(chunks)::value, decltype(blocks)::value>, rows, blocks,
                threads, stream, cols, x, out);
  });
  check_launch("gelu");
}

}  // namespace fp8kit::cuda
