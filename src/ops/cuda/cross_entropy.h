// Softmax cross-entropy on the GPU (ops/cpu/cross_entropy.h's formulas; the row's sum of exponentials
// in another order: ~1e-6 relative). Device pointers.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace fp8kit::cuda {

// logits [rows, vocab]; targets [rows] (outside [0, vocab): the row is ignored, loss 0 and a zero
// gradient row); losses [rows]; dlogits (null: forward only; may be logits) [rows, vocab]. A block per
// row: one pass keeps a running max and sum per thread, the block combines them, then the gradient pass.
void cross_entropy(int64_t rows, int64_t vocab, const float* logits, const int32_t* targets, float grad_scale,
                   float* losses, float* dlogits, cudaStream_t stream);

}  // namespace fp8kit::cuda
