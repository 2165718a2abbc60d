// Token selection from logits on either device: greedy (argmax) decoding.
#pragma once

#include "ops/context.h"
#include "tensor/tensor.h"

namespace fp8kit::ops {

// logits [rows, n] f32 or bf16 -> ids [rows] i32 (resized): each row's first index of its maximum
// (NaN never wins; a row of all NaN gives 0). n < 2^31. The GPU: a block per row.
void argmax_rows(Context& c, const Tensor& logits, Tensor& ids);

}  // namespace fp8kit::ops
