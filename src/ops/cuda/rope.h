// Rotary position embeddings on the GPU (ops/cpu/rope.h's rotation, the same bits). Device pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fp8kit::cuda {

struct RopeShape {
  int64_t batch, seq, heads, head_dim;
};

// x, out [batch, seq, heads * head_dim] (out may be x); table [positions, head_dim / 2, 2], token t at
// position start + t. sign +1: forward, -1: backward (ops::cpu::rope_rotate, whose element types In
// and Out are these: float, or uint16_t for bf16 bits). A thread per pair (i, i + head_dim / 2);
// every product rounded before the sum (no fused multiply-add).
template <typename In, typename Out>
void rope_rotate(const RopeShape& shape, int64_t start, const float* table, const In* x, float sign, bool bf16,
                 Out* out, cudaStream_t stream);

}  // namespace fp8kit::cuda
