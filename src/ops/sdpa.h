// Scaled dot-product attention for language models: causal, grouped-query (kv_heads divides heads;
// query head h reads key/value head h / (heads / kv_heads)), any sequence length, never materializing
// the [seq, seq] score matrix. CPU: a tiled reference with an online softmax (memory O(seq) per row);
// GPU: cuDNN's fused flash attention (cudnn-frontend graph API), bf16 operands with float32 softmax.
// SdpaShape::fp8 runs the forward in FP8 (Transformer Engine's FP8 attention, fp8_dpa, with its
// backward in bf16 as NVTE_FP8_DPA_BWD=0 runs it): cuDNN's FP8 flash attention on Hopper.
#pragma once

#include "ops/context.h"
#include "tensor/tensor.h"

#include <cstdint>

namespace fp8kit::ops {

struct SdpaShape {
  int64_t batch = 0, seq = 0, heads = 0, kv_heads = 0, head_dim = 0;
  bool causal = true;  // false: every query sees every key
  float scale = 0.0f;  // 0: 1 / sqrt(head_dim)
  // FP8 forward: q, k and v quantized to E4M3 per tensor with current scales (448 / amax, numerics'
  // current_scale), scores from the codes' products times their scales' inverses; each tile's
  // probabilities exp(s - running max) <= 1 rounded to E4M3 at scale 448 before they multiply v's
  // codes (their row sums stay float32); out quantized to E4M3 at v's scale x 15/16 (|out| <= 1.0625
  // max |v| with probabilities rounded by at most 2^-4 of themselves: no saturation in practice; the
  // subnormal ones, below about 3.5e-5, round further) and returned dequantized: bf16 values whatever
  // bf16_out says. f32 q, k, v are quantized as they are (no bf16 copies).
  // The backward is bf16's (the FP8 forward's out and lse, the unquantized q, k, v): fp8 is ignored
  // there. The CPU emulates it with 64-key tiles, cuDNN's tiles may differ (where the running max
  // changes, probabilities round differently: agreement to FP8's resolution, not bit for bit).
  // No lengths. GPU: head_dim a multiple of 16, what cuDNN's sdpa_fp8 takes (64 and 128 are tested).
  bool fp8 = false;
};

// The dtype of q, k and v (and so of out and the gradients) that a model computing in bf16 mixed
// precision hands sdpa: Bf16 on the GPU, whose cuDNN reads and writes bf16 (f32 tensors cost a cast
// to bf16 copies at each call, and results a conversion back); F32 on the CPU, which reads f32 values
// in full and keeps f32 gradients (the exact reference's bits), and whenever bf16 is false.
DType sdpa_dtype(const Context& c, bool bf16);

// The FP8 forward's fixed scales: the probabilities' (<= 1 onto E4M3's max, 448) and out's, as a
// multiple of v's scale.
inline constexpr float kSdpaFp8ProbabilityScale = 448.0f, kSdpaFp8OutScale = 0.9375f;

// q, out [batch, seq, heads * head_dim]; k, v [batch, seq, kv_heads * head_dim]; one dtype for all of
// them, F32 or Bf16 (f32 values are read as bf16 on the GPU, where cuDNN needs bf16 operands).
// lse [batch, heads, seq] f32 (resized): each row's natural log-sum-exp of its scaled scores, what the
// backward needs to recompute the probabilities. out is resized (a default Tensor() becomes one, of
// q's dtype). bf16_out rounds out to bf16 values (always so on the GPU).
// lengths (optional; i32 [batch] on the context's device, each in [1, seq], checked on the CPU only;
// the backward has none): sequences of different lengths padded to seq (e.g. prompts batched for a
// prefill). Sequence b is its first lengths[b] rows, attended to as if alone (the CPU's bits are
// those of a call with seq = lengths[b]); its keys and values past that are masked (any finite
// values), and its rows of out and lse past it are unspecified (the CPU writes zeros). On the GPU,
// cuDNN's padding mask.
void sdpa_forward(Context& c, const SdpaShape& shape, const Tensor& q, const Tensor& k, const Tensor& v,
                  bool bf16_out, Tensor& out, Tensor& lse, const Tensor* lengths = nullptr);

// dq, dk, dv (resized, q's dtype) from the forward's inputs, out, lse and dout [batch, seq, heads *
// head_dim]; dk and dv sum over the query heads of their kv group. GPU workspace (and the bf16 copies
// of f32 tensors): the lane's scratch.
// Head dims: up to 256 on the CPU; on the GPU what cuDNN takes (multiples of 8; 64 and 128 are
// tested), its refusal naming the shape. The GPU builds a graph per lane and shape at its first call,
// which must run eagerly (not in a CUDA graph capture); later calls allocate nothing and replay.
// The CPU's bits do not depend on its thread count. The GPU's backward is cuDNN's deterministic
// algorithm, which keeps [batch, heads, seq, seq] bf16 in its workspace, while that is at most 4 GiB
// (e.g. batch 4, 32 heads, seq 4096); beyond that cuDNN's default, whose dq sums (float atomics)
// may differ in the last bits from run to run (at every size with FP8KIT_SDPA_DETERMINISTIC=0). Seq
// 1, which cuDNN refuses, has its own kernel.
void sdpa_backward(Context& c, const SdpaShape& shape, const Tensor& q, const Tensor& k, const Tensor& v,
                   const Tensor& out, const Tensor& lse, const Tensor& dout, Tensor& dq, Tensor& dk, Tensor& dv);

}  // namespace fp8kit::ops
