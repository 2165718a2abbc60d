// The Linear op on the GPU. GEMM operands are laid out K-major for cuBLASLt: FP8 operands come from
// quantize_fp8 with their transposed copies, bf16 ones from float_to_bf16_transposed (copy + transposed
// copy in one pass), fp32 ones from transposes. The steps of a narrow model are launch-bound, so
// kernels are fused where the CPU's rounding points allow: an FP8 Linear's input (or output
// gradient) is quantized and multiplied in one launch (cuda::quantize_fp8_gemm) where its shape fits;
// the bias + activation runs with the dropout and residual sum after it (cuda::linear_outputs); the
// backward of the activation and of the dropout runs inside the cast or quantization of the output
// gradient. Weight gradients (wgrad GEMMs, bias sums) go to Lane::Side (or their dgrad's lane), so
// the main lane holds only what the next layer's gradient waits for.
#include "ops/cuda/linear.h"

#include "base/error.h"
#include "ops/cuda/aligned.h"
#include "ops/cuda/context.h"
#include "ops/cuda/convert.h"
#include "ops/cuda/elementwise.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/quant_stats.h"
#include "ops/cuda/quantize.h"
#include "ops/cuda/small_fp8_gemm.h"
#include "ops/elementwise.h"
#include "ops/linear_block.h"
#include "ops/tensor_checks.h"
#include "runtime/cuda/check.h"

#include <algorithm>
#include <vector>

namespace fp8kit::ops {

namespace {

bool out_in(const LinearOp& l) { return l.layout == LinearOp::Layout::OutIn; }
bool bf16_rounding(const LinearOp& l) { return l.precision != LinearPrecision::Fp32; }

// Sizes t as [rows, cols] of `dtype` on the GPU (a no-op once sized: steps allocate nothing).
void sized(Tensor& t, int64_t rows, int64_t cols, DType dtype) { ops::sized(t, {rows, cols}, dtype, Device::Cuda); }

float* f32(Tensor& t) { return t.device_data<float>(); }
const float* f32(const Tensor& t) { return t.device_data<float>(); }
uint8_t* u8(Tensor& t) { return t.numel() == 0 ? nullptr : t.device_data<uint8_t>(); }
uint16_t* b16(Tensor& t) { return t.numel() == 0 ? nullptr : t.device_data<uint16_t>(); }

// The FP8 cast of x [rows, cols] (f32, or bf16 as x_type says) with slot `s`'s scale; the amax
// recorded when training with delayed scaling (current scaling records it in its own pass first).
cuda::QuantizeArgs quantize_args(ScalingTable& t, int s, const void* x, int64_t rows, int64_t cols, uint8_t* q,
                                 uint8_t* q_t, bool training, DType x_type = DType::F32) {
  cuda::QuantizeArgs a;
  a.x = x;
  a.x_type = x_type;
  a.rows = rows;
  a.cols = cols;
  a.format = t.format(s);
  a.scale = t.cast_scale(s, training);
  a.divide = t.divide(s);
  a.q = q;
  a.q_t = q_t;
  a.amax = training && !t.current(s) ? t.amax_slot(s, true) : nullptr;
  return a;
}

// The casts of `args` in one batched launch per scaling convention (keras-lag slots divide, the
// others multiply: per-Linear recipes mix them in one model) and input type (a group's f32 and bf16
// gradients).
void quantize_batch(Context& c, const std::vector<cuda::QuantizeArgs>& args) {
  for (const bool divide : {false, true})
    for (const DType x_type : {DType::F32, DType::Bf16}) {
      std::vector<cuda::QuantizeArgs> part;
      for (const cuda::QuantizeArgs& a : args)
        if (a.divide == divide && a.x_type == x_type) part.push_back(a);
      if (!part.empty()) cuda::quantize_fp8_batch(part, stream(c));
    }
}

// Before `args` (of slots `slots`) are cast, for those of them that scale currently: their amaxes (a
// pass without outputs), then their scales and the GEMMs' scale_invs, on the current lane. Delayed
// slots are left as they are (a model's Linears may mix the two).
void current_scales(Context& c, ScalingTable& t, const std::vector<cuda::QuantizeArgs>& args,
                    const std::vector<int>& slots, bool training) {
  std::vector<cuda::QuantizeArgs> passes;
  std::vector<int> current;
  for (size_t k = 0; k < args.size(); ++k) {
    if (!t.current(slots[k])) continue;
    cuda::QuantizeArgs a = args[k];
    a.q = nullptr;
    a.q_t = nullptr;
    a.amax = t.amax_slot(slots[k], training);
    a.epilogue.y = nullptr;  // the cast after this pass writes the producer's activated output
    a.epilogue.pre = nullptr;
    a.bias_sum = {};  // summed by the cast itself
    passes.push_back(a);
    current.push_back(slots[k]);
  }
  if (passes.empty()) return;
  quantize_batch(c, passes);
  t.current_scales(c, current, training);
}

// A GEMM's output: f32, or bf16 where a consumer reads bf16 (a dgrad into the attention's backward).
struct GemmOut {
  GemmOut(float* y) : p(y) {}  // NOLINT(google-explicit-constructor): f32 is the rule
  GemmOut(void* y, DType type) : p(y), type(type) {}
  void* p;
  DType type = DType::F32;
};

void gemm(Context& c, int64_t m, int64_t n, int64_t k, const void* a, DType at, const void* b, DType bt, GemmOut y,
          const float* a_scale_inv = nullptr, const float* b_scale_inv = nullptr, bool fast = false) {
  cuda::GemmArgs g;
  g.m = m;
  g.n = n;
  g.k = k;
  g.a = a;
  g.a_type = at;
  g.b = b;
  g.b_type = bt;
  g.y = y.p;
  g.y_type = y.type;
  g.a_scale_inv = a_scale_inv;
  g.b_scale_inv = b_scale_inv;
  g.fast_accumulation = fast;
  ops::gemm(c).gemm(g, stream(c));
}

// Whether an FP8 GEMM of n outputs over k runs on cuBLASLt, which can write bf16 (fp8_gemm).
bool cublas_fp8_shape(int64_t n, int64_t k) { return n % 16 == 0 && k % 16 == 0; }

// An FP8 GEMM; shapes that cuBLASLt would pad (n or k not a multiple of 16: a one-output Linear) run
// small_fp8_gemm instead (f32 output only), one launch instead of the padded copies.
void fp8_gemm(Context& c, int64_t m, int64_t n, int64_t k, const uint8_t* a, Fp8Format af, const uint8_t* b,
              Fp8Format bf, GemmOut y, const float* a_scale_inv, const float* b_scale_inv, bool fast) {
  if (!cublas_fp8_shape(n, k)) {
    FP8KIT_CHECK(y.type == DType::F32, "linear: the small FP8 GEMM writes f32 only");
    cuda::small_fp8_gemm(m, n, k, a, af, b, bf, a_scale_inv, b_scale_inv, static_cast<float*>(y.p), stream(c));
    return;
  }
  gemm(c, m, n, k, a, dtype_of(af), b, dtype_of(bf), y, a_scale_inv, b_scale_inv, fast);
}

// The weight gradient from the transposed operands x^T [in, rows] and g^T [out, rows]: dW [in, out] =
// x^T g, or its transpose [out, in] = g^T x for a Linear stored OutIn.
void wgrad(Context& c, LinearOp& l, Tensor& x_t, Tensor& g_t, DType xt, DType gt, const float* x_scale_inv,
           const float* g_scale_inv) {
  const int64_t M = l.rows, N = l.out, K = l.in;
  void* x = x_t.device_data<std::byte>();
  void* g = g_t.device_data<std::byte>();
  const bool f8 = is_fp8(xt);
  if (out_in(l)) {
    if (f8) {
      fp8_gemm(c, N, K, M, static_cast<uint8_t*>(g), fp8_format(gt), static_cast<uint8_t*>(x), fp8_format(xt),
               f32(*l.dw), g_scale_inv, x_scale_inv, false);
    } else {
      gemm(c, N, K, M, g, gt, x, xt, f32(*l.dw));
    }
  } else if (f8) {
    fp8_gemm(c, K, N, M, static_cast<uint8_t*>(x), fp8_format(xt), static_cast<uint8_t*>(g), fp8_format(gt),
             f32(*l.dw), x_scale_inv, g_scale_inv, false);
  } else {
    gemm(c, K, N, M, x, xt, g, gt, f32(*l.dw));
  }
}

cuda::EpilogueGradient gradient_of(Context& c, const LinearGradient& lg) {
  const LinearOp& l = *lg.linear;
  if (lg.swiglu != SwiGluPart::None)  // SwiGLU's backward (linear_backward_gated): the gate and up outputs
    return {Activation::None, f32(*lg.gate), {}, bf16_rounding(l), lg.swiglu, f32(*lg.up)};
  if (l.activation == Activation::Gelu && l.pre_in_y)  // GELU's input formed from y = x W and the bias
    return {l.activation, f32(l.y), dropout_site(c, lg.dropout), bf16_rounding(l), SwiGluPart::None, nullptr, f32(*l.b)};
  const Tensor& y = l.activation == Activation::Gelu ? l.pre : l.y;  // what the activation's backward reads
  return {l.activation, y.device_data<float>(), dropout_site(c, lg.dropout), bf16_rounding(l)};
}

// GELU's input, written by the epilogue for the backward; null for other activations.
float* pre_of(LinearOp& l) {
  if (l.activation != Activation::Gelu) return nullptr;
  sized(l.pre, l.rows, l.out, DType::F32);
  return f32(l.pre);
}

}  // namespace

void cuda_linear_prepare_weights(Context& c, std::span<LinearOp* const> linears, bool training) {
  if (linears.empty()) return;
  switch (linears[0]->precision) {
    case LinearPrecision::Fp32: {  // the transpose of w: [out, in] for fprop, or [in, out] for dgrad
      std::vector<cuda::Transpose> transposes;
      for (LinearOp* l : linears) {
        if (out_in(*l)) {
          if (!training) continue;
          sized(l->wc, l->in, l->out, DType::F32);
          transposes.push_back({f32(*l->w), l->out, l->in, f32(l->wc)});
        } else {
          sized(l->wc_t, l->out, l->in, DType::F32);
          transposes.push_back({f32(*l->w), l->in, l->out, f32(l->wc_t)});
        }
      }
      if (!transposes.empty()) cuda::transpose(transposes, stream(c));
      break;
    }
    case LinearPrecision::Bf16: {  // bf16 copies: [in, out] for dgrad (when training), [out, in] for fprop
      std::vector<cuda::Bf16Cast> casts;
      for (LinearOp* l : linears) {
        sized(l->wc, l->in, l->out, DType::Bf16);
        sized(l->wc_t, l->out, l->in, DType::Bf16);
        uint16_t* dgrad = training ? b16(l->wc) : nullptr;
        casts.push_back(out_in(*l) ? cuda::Bf16Cast{f32(*l->w), l->out, l->in, b16(l->wc_t), dgrad}
                                   : cuda::Bf16Cast{f32(*l->w), l->in, l->out, dgrad, b16(l->wc_t)});
      }
      cuda::float_to_bf16_transposed(casts, stream(c));
      break;
    }
    case LinearPrecision::Fp8: {
      std::vector<cuda::QuantizeArgs> args;
      std::vector<int> slots;
      ScalingTable& t = *linears[0]->scaling;
      for (LinearOp* l : linears) {
        FP8KIT_CHECK(l->scaling == &t, "linear: Linears prepared together share one scaling table");
        const DType format = dtype_of(t.format(l->slot + 1));
        sized(l->wc, l->in, l->out, format);
        sized(l->wc_t, l->out, l->in, format);
        args.push_back(out_in(*l) ? quantize_args(t, l->slot + 1, f32(*l->w), l->out, l->in, u8(l->wc_t), u8(l->wc), training)
                                  : quantize_args(t, l->slot + 1, f32(*l->w), l->in, l->out, u8(l->wc), u8(l->wc_t), training));
        slots.push_back(l->slot + 1);
      }
      current_scales(c, t, args, slots, training);
      quantize_batch(c, args);
      if (training && t.recording())  // health statistics: the weights as this step's casts saw them
        for (LinearOp* l : linears) t.record(c, l->slot + 1, *l->w);
      break;
    }
    case LinearPrecision::Fp8Block:
      for (LinearOp* l : linears) linear_block_prepare_weights(c, *l);
      break;
  }
}

cuda::LinearEpilogue deferred_epilogue(LinearOp& l) {
  if (!l.has_epilogue()) return {};
  l.pre_in_y = false;  // GELU's input written to pre
  return {f32(*l.b), l.activation, bf16_rounding(l), f32(l.y), pre_of(l)};
}

void cuda_linear_prepare_input(Context& c, LinearOp& l, const Tensor& x, bool training) {
  const int64_t M = x.numel() / l.in, K = l.in;
  if (l.precision == LinearPrecision::Fp8) {  // a delayed slot's cast, as the forward's (no producer)
    ScalingTable& t = *l.scaling;
    sized(l.xc, M, K, dtype_of(t.format(l.slot)));
    sized(l.xc_t, K, M, dtype_of(t.format(l.slot)));
    cuda::quantize_fp8(quantize_args(t, l.slot, f32(x), M, K, u8(l.xc), training ? u8(l.xc_t) : nullptr, training),
                       stream(c));
  } else {
    sized(l.xc, M, K, DType::Bf16);
    sized(l.xc_t, K, M, DType::Bf16);
    const cuda::Bf16Cast cast{f32(x), M, K, b16(l.xc), training ? b16(l.xc_t) : nullptr};
    cuda::float_to_bf16_transposed({&cast, 1}, stream(c));
  }
  l.prepared_input = &x;
}

// The bias and activation of a producer whose output was deferred, as a cast's epilogue. GELU's
// values are not written: the cast's operands hold the activated ones, and GELU's backward forms its
// input again from y, left as x W, and the bias (pre_in_y: no write of pre). ReLU's backward masks
// by y, so its activated y is written.
cuda::LinearEpilogue pending(LinearOp* producer) {
  if (producer == nullptr || !producer->has_epilogue()) return {};
  LinearOp& l = *producer;
  if (l.activation != Activation::Gelu) return deferred_epilogue(l);
  l.pre_in_y = true;
  return {f32(*l.b), l.activation, bf16_rounding(l)};
}

// l.y = act(l.y + b) in place, then `next`, as the kernel takes it.
cuda::LinearOutput output_of(Context& c, LinearOp& l, const LinearOutput& next) {
  l.pre_in_y = false;  // GELU's input written to pre
  return {f32(l.y),
          l.has_epilogue() ? f32(*l.b) : nullptr,
          l.rows,
          l.out,
          l.activation,
          dropout_site(c, next.dropout),
          next.residual != nullptr ? f32(*next.residual) : nullptr,
          next.out != nullptr ? f32(*next.out) : nullptr,
          l.has_epilogue() ? pre_of(l) : nullptr};
}

// The same in one pass.
void outputs(Context& c, LinearOp& l, const LinearOutput& next) {
  if (!l.has_epilogue() && next.out == nullptr) return;
  const cuda::LinearOutput o = output_of(c, l, next);
  cuda::linear_outputs({&o, 1}, bf16_rounding(l), stream(c));
}

void cuda_linear_finish(Context& c, std::span<LinearOp* const> linears) {
  std::vector<cuda::LinearOutput> all;
  for (LinearOp* l : linears) {
    FP8KIT_CHECK(bf16_rounding(*l) == bf16_rounding(*linears[0]), "linear_finish: Linears of one precision");
    if (l->has_epilogue()) all.push_back(output_of(c, *l, {}));
  }
  if (!all.empty()) cuda::linear_outputs(all, bf16_rounding(*linears[0]), stream(c));
}

void cuda_linear_finish(Context& c, std::span<LinearOp* const> linears, std::span<Tensor* const> outs) {
  std::vector<cuda::LinearOutput> all;
  for (size_t i = 0; i < linears.size(); ++i) {
    FP8KIT_CHECK(bf16_rounding(*linears[i]) == bf16_rounding(*linears[0]), "linear_finish: Linears of one precision");
    cuda::LinearOutput o = output_of(c, *linears[i], {});
    o.copy = outs[i]->device_data<uint16_t>();
    o.write_y = linears[i]->activation == Activation::Relu;  // only ReLU's backward reads the activated y
    all.push_back(o);
  }
  cuda::linear_outputs(all, bf16_rounding(*linears[0]), stream(c));
}

void cuda_linear_forward(Context& c, LinearOp& l, const Tensor& x, bool training, const LinearOutput& next,
                         LinearOp* producer, const GatedInput* gated) {
  const int64_t M = l.rows, N = l.out, K = l.in;
  sized(l.y, M, N, DType::F32);
  // A bf16 x reaches only the bf16 and FP8 casts of a Linear's own input (ops::linear_forward
  // converts it for the rest), which read it as it is.
  const bool bf16_x = x.dtype() == DType::Bf16;
  const float* xp = bf16_x ? nullptr : f32(x);
  if (producer != nullptr && !producer->has_epilogue()) producer = nullptr;
  // The producer's epilogue rides in this Linear's cast of x; fp32 has no cast, so it is a pass, as it
  // is while FP8 health statistics are recorded: they read x itself (GELU's output is never written
  // back to y when it rides in the cast).
  const bool records = l.precision == LinearPrecision::Fp8 && training && l.scaling->recording();
  if (producer != nullptr && (l.precision == LinearPrecision::Fp32 || l.precision == LinearPrecision::Fp8Block ||
                              l.input_of != nullptr || l.prepared_input == &x || records)) {
    outputs(c, *producer, {});
    producer = nullptr;
  }
  cuda::LinearEpilogue epilogue = pending(producer);
  if (gated != nullptr) {  // ops::linear_forward sends only what gate_fusable allows
    epilogue.up = f32(*gated->up);
    epilogue.bf16 = gated->bf16;
  }
  switch (l.precision) {
    case LinearPrecision::Fp32:
      gemm(c, M, N, K, xp, DType::F32, out_in(l) ? f32(*l.w) : f32(l.wc_t), DType::F32, f32(l.y));
      break;
    case LinearPrecision::Bf16: {
      // The input's bf16 copy for fprop and, when training, its transposed copy for wgrad (or the
      // copies of the Linear that shares this input).
      LinearOp& owner = l.input_owner();
      if (bf16_x) {  // fprop reads x itself: only wgrad's transposed copy to make
        if (training) {
          sized(l.xc_t, K, M, DType::Bf16);
          cuda::Bf16Cast cast{nullptr, M, K, nullptr, b16(l.xc_t)};
          cast.x_bf16 = x.device_data<uint16_t>();
          cuda::float_to_bf16_transposed({&cast, 1}, stream(c));
        }
      } else if (l.input_of == nullptr && l.prepared_input != &x) {
        sized(l.xc, M, K, DType::Bf16);
        sized(l.xc_t, K, M, DType::Bf16);
        const cuda::Bf16Cast cast{xp, M, K, b16(l.xc), training ? b16(l.xc_t) : nullptr, epilogue};
        cuda::float_to_bf16_transposed({&cast, 1}, stream(c));
      } else {
        FP8KIT_CHECK(owner.prepared_input == &x,
                     "linear: a Linear sharing another's input cast must see the same input, prepared first");
      }
      gemm(c, M, N, K, bf16_x ? x.device_data<uint16_t>() : b16(owner.xc), DType::Bf16, b16(l.wc_t), DType::Bf16,
           f32(l.y));
      break;
    }
    case LinearPrecision::Fp8: {
      ScalingTable& t = *l.scaling;
      const Fp8Format f = t.format(l.slot);
      // x's codes for fprop and, transposed, for wgrad: quantized here, by linear_prepare_input, or by
      // the Linear whose quantization this one shares (its slot takes that cast's amax).
      LinearOp& in = l.input_owner();
      if (&in == &l && l.prepared_input != &x) {
        sized(l.xc, M, K, dtype_of(f));
        sized(l.xc_t, K, M, dtype_of(f));
        cuda::QuantizeArgs args =
            quantize_args(t, l.slot, x.device_data<std::byte>(), M, K, u8(l.xc), u8(l.xc_t), training, x.dtype());
        args.epilogue = epilogue;
        // Replaying (recomputation): the scale the step's first forward made.
        if (!(training && t.replaying())) current_scales(c, t, {args}, {l.slot}, training);
        if (cuda::quantize_fp8_gemm_fits(K, N)) {  // the quantization and the GEMM in one launch
          args.q = nullptr;  // only the transposed codes (wgrad's) are read after it
          cuda::quantize_fp8_gemm(args, u8(l.wc_t), t.format(l.slot + 1), N, t.gemm_scale_inv(l.slot),
                                  t.gemm_scale_inv(l.slot + 1), f32(l.y), stream(c));
          break;
        }
        cuda::quantize_fp8(args, stream(c));
      } else {
        FP8KIT_CHECK(in.prepared_input == &x,
                     "linear: a Linear sharing another's input quantization must see the same input, prepared first");
        if (&in != &l && training) t.copy_amax(c, in.slot, l.slot);
      }
      fp8_gemm(c, M, N, K, u8(in.xc), f, u8(l.wc_t), t.format(l.slot + 1), f32(l.y), t.gemm_scale_inv(in.slot),
               t.gemm_scale_inv(l.slot + 1), true);
      break;
    }
    case LinearPrecision::Fp8Block:
      linear_block_forward(c, l, x, training);
      break;
  }
  // Health statistics of x as its cast saw it (a producer's epilogue applied in its own pass above),
  // before `next` may write over it.
  if (records) l.scaling->record(c, l.slot, x);
  // The bias and activation in place, then the dropout and residual sum that follow, in one pass
  // (unless the consumer of y applies them).
  if (!next.deferred) outputs(c, l, next);
}

void cuda_linear_backward(Context& c, std::span<const LinearGradient> given) {
  LinearOp& first = *given[0].linear;
  const int64_t M = first.rows, N = first.out, K = first.in;
  const LinearPrecision precision = first.precision;
  // FP8: each Linear's gradient quantization and dgrad GEMM in one launch on its lane when the shape
  // fits (its MMAs accumulate in fp32 registers, as the split accumulator that dgrad asks for); else
  // the quantizations in one launch, then the GEMMs.
  const bool fused = precision == LinearPrecision::Fp8 && cuda::quantize_fp8_gemm_fits(N, K) &&
                     std::all_of(given.begin(), given.end(), [](const LinearGradient& g) { return g.input_gradient; });
  // At large shapes the bf16 and (unfused) FP8 gradient casts, which read dy (and GELU's input) anyway,
  // sum the bias gradients themselves: bias_sum(k) for member k's cast, each with its part of the scratch.
  const bool sums_in_casts = (precision == LinearPrecision::Bf16 || (precision == LinearPrecision::Fp8 && !fused)) &&
                             first.db != nullptr && cuda::cast_sums_bias(M, N, LinearOp::kBiasGradientOrder);
  // bf16 output gradients are read as they are by the bf16 and unfused FP8 casts that apply no
  // activation's or dropout's backward, while no FP8 health statistics (which read f32) are recorded,
  // and that sum the bias in their own tiles (bias_backward reads f32), which a launch does for all
  // its members or none: with biases, only when every member's dy is read so (and for FP8 within one
  // launch's rows of pieces); without, member by member (the Llama's f32 dk from RoPE beside its bf16
  // dv). The rest are taken as f32 (dy_f32). (A group's Linears have bias gradients all or none.)
  const bool biased = first.db != nullptr;
  const auto reads_bf16 = [&](const LinearGradient& g) {
    const LinearOp& l = *g.linear;
    if (g.dy->dtype() != DType::Bf16 || l.activation != Activation::None || g.dropout.active ||
        g.swiglu != SwiGluPart::None)
      return false;
    if (precision == LinearPrecision::Bf16)  // the wide tile where the bias is summed
      return cuda::aligned(g.dy->device_data<std::byte>(), 8) && (!biased || (sums_in_casts && M % 4 == 0 && N % 4 == 0));
    return precision == LinearPrecision::Fp8 && !fused && !first.scaling->recording() &&
           (!biased || (sums_in_casts && LinearOp::kBiasGradientOrder.pieces(M) <= 65535));
  };
  const bool all_bf16 = std::all_of(given.begin(), given.end(), reads_bf16);
  std::vector<LinearGradient> group(given.begin(), given.end());
  for (LinearGradient& g : group) {
    if (g.dy->dtype() == DType::F32 || (reads_bf16(g) && (!biased || all_bf16))) continue;
    ops::convert(c, *g.dy, DType::F32, g.linear->dy_f32);
    g.dy = &g.linear->dy_f32;
  }
  // dx into g.dx_bf16 straight from the bf16 and FP8 dgrad GEMMs on cuBLASLt (bf16 output); the rest
  // write f32 into l.dx, rounded into g.dx_bf16 at the end.
  const auto direct_dx = [&](const LinearGradient& g) {
    return g.dx_bf16 != nullptr && g.input_gradient &&
           (precision == LinearPrecision::Bf16 || (precision == LinearPrecision::Fp8 && !fused && cublas_fp8_shape(K, N)));
  };
  const auto dgrad_out = [&](const LinearGradient& g) {
    return direct_dx(g) ? GemmOut(g.dx_bf16->device_data<uint16_t>(), DType::Bf16) : GemmOut(f32(g.linear->dx));
  };
  const bool lanes = std::any_of(group.begin(), group.end(), [](const LinearGradient& g) { return g.lane != Lane::Main; });
  // A wgrad GEMM runs on its dgrad's lane (after it), or on the side lane when that is Main.
  auto wgrad_lane = [](Lane dgrad) { return dgrad == Lane::Main ? Lane::Side : dgrad; };
  auto fork_lanes = [&] {
    for (const LinearGradient& g : group)
      if (g.lane != Lane::Main) c.fork(g.lane);
  };
  std::vector<cuda::BiasBackward> bias;  // for bias_backward: f32 dy only (reads_bf16)
  for (const LinearGradient& g : group) {
    LinearOp& l = *g.linear;
    if (!direct_dx(g)) sized(l.dx, M, K, DType::F32);
    bias.push_back({g.dy->dtype() == DType::F32 ? f32(*g.dy) : nullptr, gradient_of(c, g), nullptr,
                    l.db != nullptr ? f32(*l.db) : nullptr});
  }
  // The bias gradients of the group in one pass on `lane`, with its scratch.
  auto bias_sums = [&](Lane lane) {
    if (first.db == nullptr) return;  // Linears without bias
    const Context::OnLane on(c, lane);
    const int64_t floats =
        cuda::bias_backward_workspace(M, N, LinearOp::kBiasGradientOrder, static_cast<int64_t>(group.size()));
    cuda::bias_backward(bias, M, N, LinearOp::kBiasGradientOrder, static_cast<float*>(c.scratch(floats * sizeof(float))),
                        stream(c));
  };
  const int64_t sum_floats = cuda::bias_backward_workspace(M, N, LinearOp::kBiasGradientOrder);
  float* const sums_workspace =
      sums_in_casts ? static_cast<float*>(c.scratch(sizeof(float) * sum_floats * static_cast<int64_t>(group.size())))
                    : nullptr;
  auto bias_sum = [&](size_t k) -> cuda::BiasSum {
    LinearOp& l = *group[k].linear;
    if (!sums_in_casts || l.db == nullptr) return {};
    return {f32(*l.db), LinearOp::kBiasGradientOrder, sums_workspace + static_cast<int64_t>(k) * sum_floats};
  };
  switch (precision) {
    case LinearPrecision::Fp32: {
      // g (the backward of the activation and dropout) on Main, with the bias gradients; the operands'
      // transposes and the wgrads on the side.
      for (size_t t = 0; t < group.size(); ++t) {
        LinearOp& l = *group[t].linear;
        sized(l.g, M, N, DType::F32);
        bias[t].g = f32(l.g);
        if (l.db == nullptr) {  // no bias, activation or dropout: g is dy
          FP8KIT_CHECK(l.activation == Activation::None && !group[t].dropout.active,
                       "linear backward: a Linear without bias gradient has no activation or dropout");
          FP8KIT_CUDA_CHECK(cudaMemcpyAsync(f32(l.g), f32(*group[t].dy), M * N * sizeof(float), cudaMemcpyDeviceToDevice, stream(c)));
        }
      }
      bias_sums(Lane::Main);
      c.fork(Lane::Side);
      {
        const Context::OnLane side(c, Lane::Side);
        std::vector<cuda::Transpose> transposes;
        for (const LinearGradient& g : group) {
          LinearOp& l = *g.linear;
          sized(l.xc_t, K, M, DType::F32);
          sized(l.gc_t, N, M, DType::F32);
          transposes.push_back({f32(*l.x), M, K, f32(l.xc_t)});
          transposes.push_back({f32(l.g), M, N, f32(l.gc_t)});
        }
        cuda::transpose(transposes, stream(c));
      }
      if (lanes) fork_lanes();
      for (const LinearGradient& g : group) {
        LinearOp& l = *g.linear;
        if (g.input_gradient) {
          const Context::OnLane lane(c, g.lane);
          gemm(c, M, K, N, f32(l.g), DType::F32, out_in(l) ? f32(l.wc) : f32(*l.w), DType::F32, f32(l.dx));  // dx = g W^T
        }
        c.join(g.lane);
        const Context::OnLane side(c, Lane::Side);  // dW = x^T g (operands transposed on the side)
        wgrad(c, l, l.xc_t, l.gc_t, DType::F32, DType::F32, nullptr, nullptr);
      }
      break;
    }
    case LinearPrecision::Bf16: {
      // wc and the input's xc_t come from the forward.
      std::vector<cuda::Bf16Cast> casts;
      // dgrad's operand: dy itself when bf16, else its bf16 copy.
      const auto dgrad_operand = [&](const LinearGradient& g) {
        return g.dy->dtype() == DType::Bf16 ? g.dy->device_data<uint16_t>() : b16(g.linear->gc);
      };
      for (size_t t = 0; t < group.size(); ++t) {
        LinearOp& l = *group[t].linear;
        const Tensor& dy = *group[t].dy;
        const bool copy = group[t].input_gradient && dy.dtype() == DType::F32;  // dgrad's operand to make
        if (copy) sized(l.gc, M, N, DType::Bf16);
        sized(l.gc_t, N, M, DType::Bf16);
        cuda::Bf16Cast cast{dy.dtype() == DType::F32 ? f32(dy) : nullptr, M, N, copy ? b16(l.gc) : nullptr,
                            b16(l.gc_t), {}, bias[t].gradient, bias_sum(t)};
        if (dy.dtype() == DType::Bf16) cast.x_bf16 = dy.device_data<uint16_t>();
        casts.push_back(cast);
      }
      cuda::float_to_bf16_transposed(casts, stream(c));
      c.fork(Lane::Side);
      if (lanes) fork_lanes();
      if (!sums_in_casts) bias_sums(Lane::Side);
      for (const LinearGradient& g : group) {
        LinearOp& l = *g.linear;
        if (g.input_gradient) {
          const Context::OnLane lane(c, g.lane);
          gemm(c, M, K, N, dgrad_operand(g), DType::Bf16, b16(l.wc), DType::Bf16, dgrad_out(g));
        }
        c.join(g.lane);
        LinearOp& in = l.input_owner();
        const Context::OnLane lane(c, wgrad_lane(g.lane));
        wgrad(c, l, in.xc_t, l.gc_t, DType::Bf16, DType::Bf16, nullptr, nullptr);
      }
      break;
    }
    case LinearPrecision::Fp8: {
      ScalingTable& t = *first.scaling;
      const Fp8Format fb = t.format(first.slot + 2), ff = t.format(first.slot + 1);
      std::vector<cuda::QuantizeArgs> args;
      std::vector<int> slots;
      for (size_t k = 0; k < group.size(); ++k) {
        LinearOp& l = *group[k].linear;
        sized(l.gc, M, N, dtype_of(fb));
        sized(l.gc_t, N, M, dtype_of(fb));
        const Tensor& dy = *group[k].dy;
        args.push_back(quantize_args(t, l.slot + 2, dy.device_data<std::byte>(), M, N,
                                     group[k].input_gradient ? u8(l.gc) : nullptr, u8(l.gc_t), true, dy.dtype()));
        args.back().gradient = bias[k].gradient;
        slots.push_back(l.slot + 2);
      }
      // Health statistics of g = gradient(dy) as each cast quantizes it, after the cast on its lane.
      auto record_gradient = [&](size_t k) {
        if (!t.recording()) return;
        const int s = group[k].linear->slot + 2;
        cuda::quant_stats(f32(*group[k].dy), M * N, t.stats_spec(s), bias[k].gradient, t.record_data(s),
                          t.partials_data(s), stream(c), N);
      };
      if (fused) {
        if (lanes) fork_lanes();
        for (size_t k = 0; k < group.size(); ++k) {
          LinearOp& l = *group[k].linear;
          {
            const Context::OnLane lane(c, group[k].lane);
            current_scales(c, t, {args[k]}, {slots[k]}, true);
            args[k].q = nullptr;  // only the transposed codes (wgrad's) are read after it
            cuda::quantize_fp8_gemm(args[k], u8(l.wc), ff, K, t.gemm_scale_inv(l.slot + 2),
                                    t.gemm_scale_inv(l.slot + 1), f32(l.dx), stream(c));
            record_gradient(k);
          }
          c.join(group[k].lane);
        }
        c.fork(Lane::Side);
      } else {
        for (size_t k = 0; k < group.size(); ++k) args[k].bias_sum = bias_sum(k);
        current_scales(c, t, args, slots, true);
        quantize_batch(c, args);
        for (size_t k = 0; k < group.size(); ++k) record_gradient(k);
        c.fork(Lane::Side);
        if (lanes) fork_lanes();
      }
      if (!sums_in_casts) bias_sums(Lane::Side);
      for (const LinearGradient& g : group) {
        LinearOp& l = *g.linear;
        const int s = l.slot;
        if (!fused) {
          if (g.input_gradient) {
            const Context::OnLane lane(c, g.lane);
            fp8_gemm(c, M, K, N, u8(l.gc), fb, u8(l.wc), ff, dgrad_out(g), t.gemm_scale_inv(s + 2),
                     t.gemm_scale_inv(s + 1), false);
          }
          c.join(g.lane);
        }
        LinearOp& in = l.input_owner();  // whose codes of x the forward read
        const Context::OnLane lane(c, wgrad_lane(g.lane));
        wgrad(c, l, in.xc_t, l.gc_t, dtype_of(t.format(s)), dtype_of(fb), t.gemm_scale_inv(in.slot),
              t.gemm_scale_inv(s + 2));
      }
      break;
    }
    case LinearPrecision::Fp8Block: {
      // g (the backward of the activation and dropout) with the bias gradients on Main, as for fp32; without a
      // bias gradient there is no ReLU or dropout, and g is dy. Then each dgrad on Main, its wgrad on the side.
      for (size_t t = 0; t < group.size(); ++t) {
        LinearOp& l = *group[t].linear;
        if (l.db == nullptr) {
          FP8KIT_CHECK(l.activation == Activation::None && !group[t].dropout.active,
                       "linear backward: a Linear without bias gradient has no activation or dropout");
          continue;
        }
        sized(l.g, M, N, DType::F32);
        bias[t].g = f32(l.g);
      }
      bias_sums(Lane::Main);
      for (const LinearGradient& g : group) {
        LinearOp& l = *g.linear;
        linear_block_backward(c, l, l.db != nullptr ? l.g : *g.dy, g.input_gradient);
      }
      break;
    }
  }
  // The dx made in f32 where bf16 was asked for, each on Main after its dgrad's lane was joined.
  for (const LinearGradient& g : group)
    if (g.dx_bf16 != nullptr && g.input_gradient && !direct_dx(g)) ops::convert(c, g.linear->dx, DType::Bf16, *g.dx_bf16);
}

}  // namespace fp8kit::ops
