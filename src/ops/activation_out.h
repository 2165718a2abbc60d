// Where an inference op writes an activation that a GEMM reads next: as bf16, or as E4M3 codes for an
// FP8 GEMM, with a static per-tensor scale (calibrated) or a current scale per row (per token). The
// fp8 bytes are exactly ops::quantize's of the op's bf16 result, which the GPU kernels compute in the
// same pass (the CPU rounds to bf16, then quantizes).
#pragma once

#include "ops/context.h"
#include "tensor/qtensor.h"
#include "tensor/tensor.h"

#include <cstdint>
#include <string_view>

namespace fp8kit::ops {

struct ActivationOut {
  Tensor* bf16 = nullptr;         // [rows, cols] bf16 (resized)
  QTensor* fp8 = nullptr;         // or: quantized as spec says (exactly one of bf16 / fp8)
  QuantSpec spec{};               // E4M3; PerTensor (then `scale` is required) or PerRow (current scaling,
                                  // spec.options)
  const Tensor* scale = nullptr;  // PerTensor: [1] f32 on c's device, the quantization multiplier
  // PerTensor: raise fp8->amax (zeroed first) as quantize does. false: fp8->amax is left unspecified,
  // and the GPU queues no zeroing before the kernel (a static scale nothing reads the amax of, as in
  // a decode step's graph).
  bool record_amax = true;
};

// The ops' side of an ActivationOut (ops/activation_out.cpp); the GPU's is ops/cuda/activation_out.h.
namespace detail {

// Checks `out` for a [rows, cols] result of `op` (one line naming what to fix) and sizes its tensors
// on c's device: bf16 [rows, cols], or fp8's codes [rows, cols] E4M3, no transposed codes, scale_inv
// and amax [1] (PerTensor) or [rows, 1] (PerRow). Storage of the same size is reused (a captured
// graph allocates nothing).
void prepare_activation_out(const Context& c, const ActivationOut& out, int64_t rows, int64_t cols,
                            std::string_view op);

// CPU: the tensor an op writes its bf16 result to: *out.bf16, or `staging` (sized [rows, cols] bf16)
// that finish_activation_out then quantizes into *out.fp8.
Tensor& activation_bf16(const ActivationOut& out, int64_t rows, int64_t cols, Tensor& staging);
void finish_activation_out(Context& c, const ActivationOut& out, const Tensor& staging);

}  // namespace detail
}  // namespace fp8kit::ops
