// The GPU kernels' view of an ops::ActivationOut (ops/activation_out.h): where a row kernel stores its
// bf16 results, or their E4M3 codes with the scale of ops::quantize (ops/cuda/activation_out.cuh does
// it on the device). Device pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "ops/activation_out.h"

namespace fp8kit::cuda {

enum class OutKind : uint8_t {
  Bf16,       // bf16 values into `bf16`
  PerTensor,  // codes of value * *scale; amax (null: none) raised (zeroed by the launcher first),
              // scale_inv = 1 / *scale
  PerRow,     // codes of value * current_scale(row's amax); a scale_inv and an amax per row
};

struct ActivationOutArgs {
  OutKind kind = OutKind::Bf16;
  uint16_t* bf16 = nullptr;      // [rows, cols]
  uint8_t* codes = nullptr;      // [rows, cols] E4M3
  float* scale_inv = nullptr;    // [1] or [rows]
  float* amax = nullptr;         // [1] or [rows]
  const float* scale = nullptr;  // PerTensor: [1]
  float fp8_max = 448.0f;        // PerRow: numerics' current_scale with these
  int margin = 0;
  bool power_of_two = false;
};

// For a result of no rows (the row kernels launch nothing): per tensor, scale_inv = 1 / *scale, as
// quantize writes it.
void finish_empty_activation(const ActivationOutArgs& out, cudaStream_t stream);

}  // namespace fp8kit::cuda

namespace fp8kit::ops::detail {

// The kernels' arguments for an `out` that prepare_activation_out has sized; per tensor with
// record_amax, queues the zeroing of its amax on stream(c) (the kernel raises it).
cuda::ActivationOutArgs activation_out_args(Context& c, const ActivationOut& out);

}  // namespace fp8kit::ops::detail
