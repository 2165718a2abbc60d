// Small element-wise GPU kernels of a training step: residual sums and their gradients, a Linear's bias +
// activation epilogue (fused with the dropout and residual sum that follow it) and its backward (dropout,
// activation, bias gradient), transposes that lay GEMM operands out K-major for cuBLASLt. Device pointers;
// work queued on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <span>

#include "ops/cuda/dropout.h"
#include "ops/cuda/linear_epilogue.h"
#include "ops/piece_order.h"
#include "tensor/tensor.h"

namespace fp8kit::cuda {

// out = a + b, rounded to bf16 when bf16 (ops::cpu::add's bits). out may alias a or b.
void add(const float* a, const float* b, bool bf16, float* out, int64_t n, cudaStream_t stream);

// out = dropout_backward(a + ((b + c) + d)), the sums in float32 in that order: the gradient of a
// dropout output that feeds a residual branch (a) and up to three Linears (b, c, d: query, key, value;
// c and d may be null: a + b, a + (b + c)). dropout: ops::dropout_backward's values (keep probability
// as in bf16 or float32 training); inactive: the sum. n < 2^32 with an active dropout.
void residual_gradient(const float* a, const float* b, const float* c, const float* d, const DropoutSite& dropout,
                       bool bf16, float* out, int64_t n, cudaStream_t stream);

// A Linear's output and what the model does with it next, in one pass, each step rounded as its own
// op: y [rows, cols] in place = act(y + bias) (bf16: act(bf16(bf16(y) + bf16(bias))), the Linear op's
// linear_epilogue; no bias: y as it is, unrounded; GELU's input into pre when set);
// then, when out is set, out = dropout_forward(y) (elements indexed row-major), and with residual
// out = residual + that (bf16: rounded), as add(residual, dropout(y)). With copy set, act(y + bias)
// also goes there as bf16 (float_to_bf16's rounding). act(y + bias) is written back into y only when
// write_y (the default).
struct LinearOutput {
  float* y = nullptr;
  const float* bias = nullptr;  // [cols], or null: no epilogue
  int64_t rows = 0, cols = 0;
  Activation activation = Activation::None;
  DropoutSite dropout{};            // inactive: identity
  const float* residual = nullptr;  // [rows, cols] or null
  float* out = nullptr;             // [rows, cols] or null: y only (dropout and residual unused)
  float* pre = nullptr;             // [rows, cols] or null
  uint16_t* copy = nullptr;         // [rows, cols] or null
  bool write_y = true;
};
// Up to 4 outputs (any shapes, fewer than 2^32 elements each) in one launch; bf16: mixed bf16 rounding.
void linear_outputs(std::span<const LinearOutput> outputs, bool bf16, cudaStream_t stream);

// The bias gradient of a Linear from its output gradient dy [rows, cols]: g = gradient(dy) (the
// backward of its ReLU and of the dropout after it, linear_epilogue.h); bias_grad [cols] = sum of g
// over rows, float32, added in exactly `order` (ops::LinearOp::kBiasGradientOrder: bit-identical to the
// CPU, the same bits every run). g [rows, cols] is also written when set (it may alias dy).
struct BiasBackward {
  const float* dy = nullptr;
  EpilogueGradient gradient{};
  float* g = nullptr;
  float* bias_grad = nullptr;
};
// Up to 4 Linears of one shape [rows, cols] (query, key and value) in one pass. workspace:
// bias_backward_workspace(rows, cols, order, tensors.size()) floats of device scratch.
void bias_backward(std::span<const BiasBackward> tensors, int64_t rows, int64_t cols, ops::PieceOrder order,
                   float* workspace, cudaStream_t stream);
int64_t bias_backward_workspace(int64_t rows, int64_t cols, ops::PieceOrder order, int64_t tensors = 1);

// One matrix of transpose: out [cols, rows] = x [rows, cols] transposed (float32; the bf16 twin is
// convert.h's float_to_bf16_transposed).
struct Transpose {
  const float* x = nullptr;
  int64_t rows = 0, cols = 0;
  float* out = nullptr;
};
// Queues the transposes of `matrices` (any shapes) as one launch per 16 matrices.
void transpose(std::span<const Transpose> matrices, cudaStream_t stream);

// out[i * stride] = x[i] for i < count (e.g. scales to 16-byte aligned slots for cuBLASLt); when zero
// is set, also zero[i] = 0 in the same launch (e.g. the amaxes the scaling update has just consumed).
void spread(const float* x, int64_t count, int64_t stride, float* out, cudaStream_t stream, float* zero = nullptr);

// *counter += 1 (a step counter in device memory, advanced in stream order).
void increment(uint64_t* counter, cudaStream_t stream);

}  // namespace fp8kit::cuda
