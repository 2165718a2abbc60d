// A Linear's work on either device in the precision it runs in: y = act(x W + b) with x [rows, in],
// W [in, out] (row-major, Keras's kernel layout) or W^T stored [out, in] (PyTorch's and Hugging Face's
// layout, LinearOp::Layout::OutIn), b [out], act ReLU, GELU (tanh approximation, ops/activation.h) or
// none, and its gradients.
//   Fp32: float32 GEMMs.
//   Bf16: x, W (and dy in the backward) rounded to bf16, float32 accumulation, y rounded to bf16:
//         bf16(bf16(x W) + bf16(b)) before the activation (Keras's mixed_bfloat16); GELU's output
//         rounded to bf16 again (ReLU's is a bf16 value already).
//   Fp8:  y = q(x) q(W), dx = q(dy) q(W)^T, dW = q(x)^T q(dy): E4M3 inputs and weights, E5M2 output
//         gradients (the recipe's formats), per-tensor scales from the model's ScalingTable (delayed
//         or current), fp32 accumulation, y rounded to bf16; the bias gradient and the activation's
//         backward use the unquantized dy.
//   Fp8Block: the same products with block scales, current scaling only (DeepSeek-V3's and Transformer
//         Engine's Float8BlockScaling; ops/linear_block.h): x and dy quantized 1 x 128 along K for fprop
//         and dgrad, and again, from their transposes, 1 x 128 along the rows for wgrad; W in 128 x 128
//         blocks (for dgrad the same blocks transposed). The recipe's formats and scale options; no
//         scaling table; y rounded to bf16, the bias, ReLU and dropout as for Fp8, as steps of their own.
// The CPU computes each step exactly (FP8 codes decoded exactly, products summed in float32 by
// OpenBLAS; the bias gradient in LinearOp::kBiasGradientOrder); the GPU runs cuBLASLt (or, for the
// small K of narrow Linears, one kernel that quantizes and multiplies), with the same rounding points
// and casts bit-identical to the CPU's; GEMM sums agree within fp32 summation order.
// The model's next steps can ride along (LinearOutput: dropout and a residual sum after the
// activation; LinearGradient: the dropout's backward), each an exact step of its own on the CPU and
// fused into the Linear's own passes on the GPU.
#pragma once

#include "ops/activation.h"
#include "ops/context.h"
#include "ops/dropout.h"
#include "ops/piece_order.h"
#include "ops/scaling_table.h"
#include "tensor/qtensor.h"
#include "tensor/tensor.h"

#include <span>

namespace fp8kit::ops {

enum class LinearPrecision { Fp32, Bf16, Fp8, Fp8Block };

// One Linear: its shape, precision and parameters, and what its forward keeps for its backward.
struct LinearOp {
  // The bias gradient's order of summation over rows (on both devices).
  static constexpr PieceOrder kBiasGradientOrder{512};

  // How the weight is stored: InOut [in, out] (Keras), OutIn [out, in] (PyTorch, HF; the K-major
  // layout FP8 tensor cores read in fprop). The gradient dw has the same layout.
  enum class Layout : uint8_t { InOut, OutIn };

  int64_t in = 0, out = 0;
  Layout layout = Layout::InOut;
  // A Linear without bias has no epilogue: y is the GEMM's float32 output as it is, in every
  // precision (no bf16 rounding pass: what consumes y rounds what it makes).
  bool has_epilogue() const { return b != nullptr; }
  Activation activation = Activation::None;  // needs a bias
  LinearPrecision precision = LinearPrecision::Fp32;
  ScalingTable* scaling = nullptr;  // Fp8: slots `slot` (inputs), slot + 1 (kernel), slot + 2 (output gradient)
  int slot = -1;
  Fp8Recipe block_recipe{};  // Fp8Block: its formats and scale options
  Tensor* w = nullptr;   // [in * out] f32 (a parameter's value), and its gradient
  Tensor* b = nullptr;   // [out], or null: no bias (and then no activation and no bias gradient)
  Tensor* dw = nullptr;
  Tensor* db = nullptr;  // null: no bias gradient (no bias, or one that is not trained)
  // The Linear whose GEMM operands of the input this one shares (query's for key and value: the same
  // x), prepared before both forwards (linear_prepare_input); null: its own. Bf16 on the GPU (the bf16
  // cast), Fp8 on both devices (the delayed-scaled codes and their transposes: the GEMMs take the
  // owner's scale_inv, equal to this one's, and this one's input slot the owner's amax, as its own
  // cast would have recorded it), Fp8Block on both devices (the 1 x 128 quantizations);
  // shares_input_operands says when.
  LinearOp* input_of = nullptr;
  // The Linear whose operands of the input this one's GEMMs read: input_of, or itself.
  LinearOp& input_owner() { return input_of != nullptr ? *input_of : *this; }
  const LinearOp& input_owner() const { return input_of != nullptr ? *input_of : *this; }

  // Set by linear_prepare_input: the input whose GEMM operand is made already (bf16 on the GPU, FP8
  // codes that may be shared), until the next linear_prepare_weights (a step's start).
  const Tensor* prepared_input = nullptr;
  // Set by the forward: its input (which must stay unchanged until the backward; a GatedInput's gate
  // where the GPU fused it, and only the fp32 backward reads x itself), rows, output
  // y [rows, out] (after the activation) and, by the backward, dx [rows, in]. GELU: pre [rows, out],
  // the activation's input (after the bias), which its backward differentiates at (written by
  // every forward). ReLU's backward masks by y itself.
  const Tensor* x = nullptr;
  int64_t rows = 0;
  Tensor y, dx, pre;
  // GELU on the GPU, set by the forward: its bias and GELU rode in the consumer's cast, which leaves y
  // as x W and writes no pre (one write of [rows, out] f32 fewer); the backward forms GELU's input from
  // y and the bias again.
  bool pre_in_y = false;
  // The precision's GEMM operands (bf16 copies, FP8 codes, transposes) and scratch, sized by the ops.
  // On the GPU wc is the weight laid out [in, out] and wc_t [out, in], whichever layout it is stored in.
  Tensor xc, xc_t, wc, wc_t, gc, gc_t, g, partials;
  // Fp8Block: x and dy quantized 1 x 128 along K (xq, gq) and along the rows (xq_t, gq_t: from the f32
  // transposes in xc_t and gc_t); W's 128 x 128 blocks as stored (wq) and transposed (wq_t).
  QTensor xq, xq_t, gq, gq_t, wq, wq_t;
  // A bf16 input (x_f32) or output gradient (dy_f32) as f32, where the path reads f32 (the CPU, fp32
  // and block scaling, FP8 health statistics and the one-launch FP8 kernels); the GPU's bf16 and FP8
  // casts read bf16 as it is.
  Tensor x_f32, dy_f32;
};

// What follows a Linear's activation in the model: out = residual + dropout(y) (bf16: each step
// rounded as its own op); with out null, y only. Or, when its output feeds another Linear alone (or
// linear_finish), `deferred`: y is left as x W, and the consumer's forward applies the bias and
// activation as it reads it (into y, before its own cast: one pass fewer on the GPU; a GELU's activated values, which
// its backward does not read, go only into the consumer's bf16 or FP8 operand there, and y keeps x W).
struct LinearOutput {
  DropoutSpec dropout{};
  const Tensor* residual = nullptr;  // [rows, out] or null
  Tensor* out = nullptr;             // [rows, out] or null
  bool deferred = false;
};

// Casts or quantizes the weights of `linears` for this step (weights do not change within a step):
// one launch for all on the GPU. Before their forwards, at every step's start.
void linear_prepare_weights(Context& c, std::span<LinearOp* const> linears, bool training);

// Makes l's GEMM operands of x ahead of its forward (the GPU's bf16 cast, x's own copy and, when
// training, its transpose; an FP8 Linear's delayed-scaled cast of x, its amax recorded as its forward
// would, unless the GPU quantizes and multiplies in one launch there; Fp8Block's 1 x 128
// quantizations of x and, when training, of x^T), so that Linears sharing them (input_of) can run
// their GEMMs side by side from the start; a no-op where the forward has nothing to prepare.
void linear_prepare_input(Context& c, LinearOp& l, const Tensor& x, bool training);

// Whether `b` can take `a`'s GEMM operands of an input they share (b.input_of = &a): both bf16; both
// FP8 with input slots of one scaling table (one recipe: lag, margin, amax history and algorithm),
// delayed (a current scale is x's own, made in a pass of its own) and of one format, so the same
// codes and scales every step, and shapes the GPU does not quantize and multiply in one launch (whose
// codes only its own GEMM reads); or both block-scaled with the same format and scale options (the
// same quantizations). Sharing or not gives the same bits on either device.
bool shares_input_operands(const LinearOp& a, const LinearOp& b);

// l.y = act(x W + b), then `next`. x: [rows, in] on the context's device, f32 or bf16 (an op's bf16
// output, cuDNN's attention's: its values are exact in f32, so either gives the same bits, and the
// GPU's bf16 and FP8 casts read half the bytes; a producer's deferred output and a prepared or
// shared input are f32). training: the FP8
// amaxes enter the scaling table (current scaling: scales from this x; neither while the table is
// replaying a recomputed forward), and the backward's operands are kept; otherwise the scales are
// frozen. producer: the Linear whose deferred output x is (its
// bias and activation are applied to x first).
void linear_forward(Context& c, LinearOp& l, const Tensor& x, bool training, const LinearOutput& next = {},
                    LinearOp* producer = nullptr);

// SwiGLU's gate deferred into the Linear that reads its output (a SwiGLU MLP's down projection): the
// Linear's input is silu(gate) up as swiglu_forward(gate, up, bf16, act) makes it (gate, up [rows, in]
// f32). The GPU computes it inside the Linear's bf16 cast or FP8 quantization of its input and never
// writes act (one write and one read of [rows, in] f32 fewer); elsewhere (the CPU, fp32 and block
// precisions, a Linear sharing another's input, FP8 health recording) swiglu_forward writes act,
// which the Linear reads.
struct GatedInput {
  const Tensor* gate = nullptr;
  const Tensor* up = nullptr;
  bool bf16 = false;
  Tensor* act = nullptr;
};
void linear_forward(Context& c, LinearOp& l, const GatedInput& x, bool training, const LinearOutput& next = {});

// Applies deferred outputs' bias and activation to each l.y in place (one launch for up to 4 on the
// GPU): for a consumer that cannot fuse them, or Linears that ran side by side.
void linear_finish(Context& c, std::span<LinearOp* const> linears);
// The same into copies of `dtype` (F32 or Bf16): *outs[i] [rows, out] = linears[i]'s finished y as
// linear_finish and then convert make it (a biased projection's bf16 operand of the attention). On
// the GPU, bf16 copies take one pass that reads x W once and writes neither y (its contents are left
// unspecified, but for ReLU's activated values, which its backward reads) nor an f32 copy.
void linear_finish(Context& c, std::span<LinearOp* const> linears, DType dtype, std::span<Tensor* const> outs);

// The gradient dy [rows, out] of one Linear's output or, with an active dropout, of the dropout that
// followed it, f32 or bf16 (as linear_forward's x); the dgrad runs on `lane` (A and B: beside Main,
// joined back before the call returns).
struct LinearGradient {
  LinearOp* linear = nullptr;
  const Tensor* dy = nullptr;
  DropoutSpec dropout{};
  Lane lane = Lane::Main;
  // false: no dx (the model's input, whose gradient nothing reads, as PyTorch skips it for an input
  // without requires_grad): the dgrad GEMM is skipped and linear->dx left as it is.
  bool input_gradient = true;
  // Set: dx goes here as bf16 [rows, in] instead of into linear->dx (for a consumer that reads bf16,
  // the attention's backward): the GPU's bf16 and FP8 dgrad GEMMs on cuBLASLt write it so (no f32 dx
  // at all); elsewhere dx is made in linear->dx and rounded into it (the same rounding).
  Tensor* dx_bf16 = nullptr;
  // Set by linear_backward_gated (the GPU's bf16 and FP8 Linears without bias): dy is the gradient of
  // SwiGLU's silu(gate) up, and this Linear's output gradient is its part of SwiGLU's backward (the
  // gate projection's, reading gate and up, or up's, reading gate), made inside its gradient's cast.
  SwiGluPart swiglu = SwiGluPart::None;
  const Tensor* gate = nullptr;
  const Tensor* up = nullptr;
};

// The backward of Linears of one shape, with bias gradients all or none, whose output gradients are
// ready together (query, key and value after attention): each one's dx [rows, in] into linear->dx, dW and db overwritten. Weight
// gradients run on Lane::Side (or their dgrad's lane): the caller joins them by the step's end.
void linear_backward(Context& c, std::span<const LinearGradient> group);

// The backward of SwiGLU's silu(gate.y) up.y together with the gate and up projections that made its
// inputs (a SwiGLU MLP's), from dact, its output's gradient: their dx and weight gradients as
// swiglu_backward(gate.y, up.y, dact, dgate, dup) and then linear_backward of the two (up's dgrad on
// up_lane) make them. On the GPU (bf16 and FP8 Linears without bias) SwiGLU's backward runs inside
// the two gradient casts, which read dact, gate.y and up.y side by side (dgate and dup are not
// written: two writes and two reads of [rows, out] f32 fewer); elsewhere swiglu_backward fills them.
void linear_backward_gated(Context& c, LinearOp& gate, LinearOp& up, const Tensor& dact, Tensor& dgate, Tensor& dup,
                           Lane up_lane);

}  // namespace fp8kit::ops
