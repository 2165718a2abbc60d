// FP8 quantization on the GPU, bit-identical to numerics/convert.h: cast fp32 or bf16 to E4M3/E5M2
// with a scale read from device memory (saturating), amax of the input in the same pass, and
// optionally the transposed FP8 copy that Hopper's TN-only FP8 GEMMs need for dgrad and wgrad.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "numerics/format.h"
#include "ops/cuda/linear_epilogue.h"
#include "ops/cuda/quantize_gemm_fits.h"
#include "tensor/tensor.h"

namespace fp8kit::cuda {

// All pointers are device pointers. x is [rows, cols], row-major.
struct QuantizeArgs {
  const void* x = nullptr;
  DType x_type = DType::F32;  // F32 or Bf16 (raw 16-bit patterns)
  int64_t rows = 0, cols = 0;
  Fp8Format format = Fp8Format::E4M3;
  // One float. Multiply (TE): q = fp8(x * scale). Divide (Keras lag): scale holds Keras's
  // dequantization multiplier m and q = fp8(x / m), as numerics::quantize_fp8_divide.
  const float* scale = nullptr;
  bool divide = false;
  uint8_t* q = nullptr;          // [rows, cols] or null
  uint8_t* q_t = nullptr;        // [cols, rows] (x transposed) or null
  float* amax = nullptr;         // one float or null: *amax = max(*amax, max |x|) (NaN ignored, inf
                                 // counted); zero it first for this tensor's own amax
  float* scale_inv = nullptr;    // one float or null: receives 1 / scale (the multiplier when divide)
  // F32 input only. With epilogue.bias set, x is first replaced by the producing Linear's act(x + bias)
  // (written to epilogue.y when set, x + bias to epilogue.pre when set), with epilogue.up by SwiGLU's
  // silu(x) up, and the codes and amax are of that. With an active gradient, x is a Linear's output
  // gradient and the codes and amax are of gradient(x). Not both.
  LinearEpilogue epilogue{};
  EpilogueGradient gradient{};
  // With the gradient: its Linear's bias gradient, summed in this pass where the cast's tile can
  // (BiasSum); a Bf16 x (no gradient to apply) only where it can (tile_sums), else it throws.
  BiasSum bias_sum{};
};

// Queues the cast on `stream`. Throws fp8kit::Error for bad arguments (naming them).
void quantize_fp8(const QuantizeArgs& args, cudaStream_t stream = nullptr);

// Queues quantize_fp8 of each of `args` (same input type, format and divide; each its own pointers,
// scale and amax slot) as one launch per 16 tensors: the same bytes, transposes and amaxes, fewer launches.
void quantize_fp8_batch(std::span<const QuantizeArgs> args, cudaStream_t stream = nullptr);

// quantize_fp8(x) and, in the same launch, the FP8 GEMM of its codes: y [x.rows, n] (f32) =
// (*x_scale_inv * *w_scale_inv) * q(x) . w^T, w [n, x.cols] row-major codes in w_format (GemmArgs'
// TN b), on the tensor cores (mma.sync m16n8k32, fp32 accumulation; scale pointers may be null: 1).
// One launch instead of two for the small K of a narrow model's Linears, whose time is latency:
// needs quantize_fp8_gemm_fits(x.cols, n) (ops/cuda/quantize_gemm_fits.h) and an f32 x; q, q_t,
// amax, scale_inv, epilogue and gradient are quantize_fp8's, bit for bit. The GEMM's scale_invs are read during the launch, so
// neither can be x.scale_inv (written during it), and y must not overlap x, q, q_t or epilogue.y.
void quantize_fp8_gemm(const QuantizeArgs& x, const uint8_t* w, Fp8Format w_format, int64_t n,
                       const float* x_scale_inv, const float* w_scale_inv, float* y, cudaStream_t stream = nullptr);

}  // namespace fp8kit::cuda
