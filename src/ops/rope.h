// Rotary position embeddings as Hugging Face's Llama applies them ("rotate_half": within each head,
// element i pairs with i + head_dim / 2), on Tensors on either device, forward and backward.
#pragma once

#include "ops/context.h"
#include "tensor/tensor.h"

#include <cstdint>

namespace fp8kit::ops {

// The cos/sin table: [positions, head_dim / 2, 2] f32 on the context's device (resized), entry
// (p, i) = (cos, sin) of p * inv_freq[i], inv_freq[i] = 1 / theta^(2i / head_dim), each computed
// as HF does in float32 (inv_freq and the product rounded to float32; cos and sin of that float,
// correctly rounded). Made once per model; the kernels only read it, so both devices use the same bits.
void rope_table(Context& c, int64_t positions, int64_t head_dim, double theta, Tensor& table);

// x [batch, seq, heads * head_dim] f32 or bf16; token t of every sequence sits at position start + t
// (start + seq <= the table's positions). For each head and i < head_dim / 2, with (c, s) the
// table's entry:  out[i] = x[i] c - x[i + h] s;  out[i + h] = x[i + h] c + x[i] s  (h = head_dim / 2),
// each product rounded to float32 and then the difference or sum (no fused multiply-add, the same
// bits on both devices); bf16 rounds out to bf16. out is resized, of `dtype`: F32, or Bf16 (the values
// bf16 rounds to, whatever bf16 says: queries and keys stored as the bf16 operands the GPU's attention
// reads). out may be x (in place) when their dtypes agree.
void rope_forward(Context& c, const Tensor& table, const Tensor& x, int64_t heads, int64_t start, bool bf16,
                  Tensor& out, DType dtype = DType::F32);
// The transpose (a rotation by -angle): dx[i] = dout[i] c + dout[i + h] s; dx[i + h] = dout[i + h] c -
// dout[i] s. dout f32 or bf16 (the GPU attention's gradients, read as they are); dx f32, resized; it
// may be dout when that is f32.
void rope_backward(Context& c, const Tensor& table, const Tensor& dout, int64_t heads, int64_t start, Tensor& dx);

}  // namespace fp8kit::ops
