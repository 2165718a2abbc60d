// Causal multi-head self-attention core (Keras MultiHeadAttention semantics with a causal mask):
// scores = (q / sqrt(head_dim)) k^T, -1e9 added where key j > query i, softmax over keys, dropout on
// the probabilities, out = dropped_probs v. Masked entries are skipped rather than computed:
// exp(-1e9 - max) is exactly 0 in float32, so skipping them changes no bit of the result.
#pragma once

#include "ops/dropout.h"

#include <cstdint>

namespace fp8kit {
class Tensor;
}

namespace fp8kit::ops {

class Context;

struct AttentionShape {
  int64_t batch, seq, heads, head_dim;
};

// The kernels' instance for head_dim and bf16: calls f.template operator()<kD, kBf16>() with kD =
// head_dim when it is 16, 32 or 64 (compiled loops), else kD = kOtherDims (CPU: 0, a runtime loop;
// CUDA: unused, as it refuses other head dims first).
template <int kOtherDims, typename F>
void dispatch_head_dim(int64_t head_dim, bool bf16, F&& f) {
  auto by_dim = [&]<bool kBf16>() {
    switch (head_dim) {
      case 16: return f.template operator()<16, kBf16>();
      case 32: return f.template operator()<32, kBf16>();
      case 64: return f.template operator()<64, kBf16>();
      default: return f.template operator()<kOtherDims, kBf16>();
    }
  };
  if (bf16) {
    by_dim.template operator()<true>();
  } else {
    by_dim.template operator()<false>();
  }
}

// q, k, v, out: [batch, seq, heads * head_dim], row-major; head h owns columns [h*head_dim, (h+1)*head_dim).
// probs: [batch, heads, seq, seq], the softmax before dropout, saved for the backward; its upper
// triangle is never written (keep it zero). mask == nullptr: no dropout.
// bf16 (Keras mixed_bfloat16): the scaled q, the scores, probs, dropped probs and out are rounded
// to bf16; dot products and the softmax itself run in float32.
void causal_attention_forward(const AttentionShape& shape, const float* q, const float* k, const float* v,
                              const DropoutMask* mask, float rate, bool bf16, float* probs, float* out);

// Gradients of the above (float32 math) from the same inputs and saved probs; dq, dk, dv overwritten.
void causal_attention_backward(const AttentionShape& shape, const float* q, const float* k, const float* v,
                               const float* probs, const DropoutMask* mask, float rate, bool bf16,
                               const float* dout, float* dq, float* dk, float* dv);

// The same on Tensors, on either device. q, k, v, out: [batch, seq, heads * head_dim] f32 (out resized;
// a default Tensor() becomes one); `shape` must match them. The probabilities' dropout is `dropout`
// (element (b, h, i, j) indexed ((b * heads + h) * seq + i) * seq + j on both devices). `saved` is what
// the backward reads, resized here, and differs by device:
//   CPU: the probabilities before dropout, [batch, heads, seq, seq] (upper triangle unspecified);
//   GPU: each row's softmax max and sum, [batch, heads, seq, 2] (the backward recomputes the
//        probabilities bit for bit from them).
// So pass saved only to the backward of the same context. GPU limits (ops/cuda/attention.h): head_dim
// 16, 32 or 64, and seq up to what a block's shared memory holds (on Hopper 544, 416, 288 for
// head_dim 16, 32, 64); the CPU takes any head_dim up to 256.
void causal_attention_forward(Context& c, const Tensor& q, const Tensor& k, const Tensor& v,
                              const AttentionShape& shape, const DropoutSpec& dropout, bool bf16, Tensor& saved,
                              Tensor& out);
// dq, dk, dv [batch, seq, heads * head_dim] f32 (resized) from the forward's inputs, its `saved` (whose
// shape gives the heads) and the same dropout and bf16. The GPU's workspace comes from c.scratch.
void causal_attention_backward(Context& c, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& saved,
                               const DropoutSpec& dropout, bool bf16, const Tensor& dout, Tensor& dq, Tensor& dk,
                               Tensor& dv);

}  // namespace fp8kit::ops
