// The Linear op: argument checks, the CPU implementation (the reference, each step exact), and the
// dispatch to the CUDA one (ops/cuda/linear.h).
#include "ops/linear.h"

#include "base/error.h"
#include "numerics/cast.h"
#include "numerics/convert.h"
#include "ops/cuda/quantize_gemm_fits.h"
#include "ops/elementwise.h"
#include "ops/gemm.h"
#include "ops/linear_block.h"
#include "ops/swiglu.h"
#include "ops/tensor_checks.h"

#include <algorithm>

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/linear.h"
#endif

namespace fp8kit::ops {

namespace {

void check_linear(const Context& c, const LinearOp& l) {
  FP8KIT_CHECK(l.in > 0 && l.out > 0 && l.w != nullptr && l.dw != nullptr,
               "linear: the op needs its sizes and parameter tensors");
  FP8KIT_CHECK(l.b != nullptr || (l.db == nullptr && l.activation == Activation::None),
               "linear: a Linear without bias has no bias gradient and no activation");
  // Any shape of in x out elements (Keras's kernel shapes), laid out as l.layout says.
  FP8KIT_CHECK(l.w->numel() == l.in * l.out && (l.b == nullptr || l.b->numel() == l.out) &&
                   l.dw->numel() == l.w->numel() && (l.db == nullptr || l.db->numel() == l.out),
               "linear: the kernel must hold {} x {} values and the bias {}", l.in, l.out, l.out);
  check_tensor(c, *l.w, l.w->shape(), DType::F32, "linear", "the kernel");
  if (l.b != nullptr) check_tensor(c, *l.b, l.b->shape(), DType::F32, "linear", "the bias");
  FP8KIT_CHECK(l.precision != LinearPrecision::Fp8 || (l.scaling != nullptr && l.slot >= 0 && l.slot + 2 < l.scaling->size()),
               "linear: an FP8 Linear needs its three slots in the scaling table");
}

// The CPU's FP8 cast of x with slot `s`'s scale (codes into `codes`, their exact values into
// `values`); records the amax when training. Returns the scale_inv the data carries.
float cast_fp8(ScalingTable& t, int s, std::span<const float> x, bool training, Tensor& codes, Tensor& values,
               Context& c) {
  const Fp8Format format = t.format(s);
  const int64_t n = static_cast<int64_t>(x.size());
  sized(codes, {n}, dtype_of(format), Device::Cpu);
  sized(values, {n}, DType::F32, Device::Cpu);
  float* amax_slot = t.amax_slot(s, training);
  if (t.current(s) && amax_slot != nullptr) {  // null: replaying, with the scale the first forward made
    *amax_slot = amax(x);
    const int slots[] = {s};
    t.current_scales(c, slots, training);
  }
  const float scale = *t.cast_scale(s, training);
  const float tensor_amax = t.divide(s) ? quantize_fp8_divide(x, scale, format, codes.span<uint8_t>())
                                       : quantize_fp8(x, scale, format, codes.span<uint8_t>());
  if (amax_slot != nullptr && training) *amax_slot = tensor_amax;
  decode_fp8(codes.span<uint8_t>(), format, values.span<float>());
  return *t.gemm_scale_inv(s);
}

// Whether an FP8 Linear's cast of x can be made ahead of its forward and shared: a delayed input slot
// (the same scale every Linear of x holds), and a shape the GPU's forward does not quantize and multiply
// in one launch (whose codes only its own GEMM reads).
bool fp8_input_shareable(const LinearOp& l) {
  return l.precision == LinearPrecision::Fp8 && l.scaling != nullptr && l.slot >= 0 && !l.scaling->current(l.slot) &&
         !cuda::quantize_fp8_gemm_fits(l.in, l.out);
}

// The health statistics of what slot s's training cast just quantized, while the table records them.
void record_health(Context& c, const LinearOp& l, int s, const Tensor& x, bool training) {
  if (training && l.scaling->recording()) l.scaling->record(c, s, x);
}

void cpu_prepare_weights(Context& c, LinearOp& l, bool training) {
  const std::span<const float> w = l.w->span<float>();
  switch (l.precision) {
    case LinearPrecision::Fp32:
      break;
    case LinearPrecision::Bf16:
      sized(l.wc, {l.w->numel()}, DType::F32, Device::Cpu);
      round_bf16(w, l.wc.span<float>());
      break;
    case LinearPrecision::Fp8:
      cast_fp8(*l.scaling, l.slot + 1, w, training, l.wc_t, l.wc, c);  // wc: the exact values, w's layout
      record_health(c, l, l.slot + 1, *l.w, training);
      break;
    case LinearPrecision::Fp8Block:
      linear_block_prepare_weights(c, l);
      break;
  }
}

// l.y [rows, out] in place = act(y + b). Mixed bf16 as Keras: bf16(bf16(y) + bf16(b)), then the
// activation (GELU's rounded to bf16 again; its input kept in l.pre for the backward).
void apply_epilogue(LinearOp& l) {
  if (!l.has_epilogue()) return;
  const bool bf16 = l.precision != LinearPrecision::Fp32;
  const int64_t rows = l.y.numel() / l.out, out = l.out;
  const float* b = l.b->data<float>();
  float* yp = l.y.data<float>();
  if (l.activation == Activation::Gelu) sized(l.pre, {rows, out}, DType::F32, Device::Cpu);
  float* pre = l.activation == Activation::Gelu ? l.pre.data<float>() : nullptr;
#pragma omp parallel for schedule(static) if (rows * out >= 65536)
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = yp + r * out;
    for (int64_t o = 0; o < out; ++o) {
      const float v = bf16 ? round_bf16(round_bf16(yr[o]) + round_bf16(b[o])) : yr[o] + b[o];
      switch (l.activation) {
        case Activation::None: yr[o] = v; break;
        case Activation::Relu: yr[o] = std::max(v, 0.0f); break;
        case Activation::Gelu:
          pre[r * out + o] = v;
          yr[o] = bf16 ? round_bf16(gelu(v)) : gelu(v);
          break;
      }
    }
  }
}

void cpu_forward(Context& c, LinearOp& l, const Tensor& x, bool training, const LinearOutput& next,
                 LinearOp* producer) {
  if (producer != nullptr) apply_epilogue(*producer);
  const int64_t rows = l.rows, in = l.in, out = l.out;
  sized(l.y, {rows, out}, DType::F32, Device::Cpu);
  float* y = l.y.data<float>();
  const GemmShape shape{rows, out, in, false, l.layout == LinearOp::Layout::OutIn};
  const bool bf16 = l.precision != LinearPrecision::Fp32;
  switch (l.precision) {
    case LinearPrecision::Fp32:
      gemm_f32(shape, 1.0f, x.data<float>(), l.w->data<float>(), 0.0f, y);
      break;
    case LinearPrecision::Bf16:
      sized(l.xc, {rows, in}, DType::F32, Device::Cpu);
      round_bf16(x.span<float>(), l.xc.span<float>());
      gemm_f32(shape, 1.0f, l.xc.data<float>(), l.wc.data<float>(), 0.0f, y);
      break;
    case LinearPrecision::Fp8: {
      // x's codes in xc_t, their exact values in xc (decoded once for fprop and wgrad): cast here, by
      // linear_prepare_input, or by the Linear whose cast this one shares (its slot takes the amax).
      const LinearOp& in = l.input_owner();
      if (&in == &l && l.prepared_input != &x) {
        cast_fp8(*l.scaling, l.slot, x.span<float>(), training, l.xc_t, l.xc, c);
      } else {
        FP8KIT_CHECK(in.prepared_input == &x,
                     "linear: a Linear sharing another's input cast must see the same input, prepared first");
        if (&in != &l && training) l.scaling->copy_amax(c, in.slot, l.slot);
      }
      record_health(c, l, l.slot, x, training);
      gemm_f32(shape, *l.scaling->gemm_scale_inv(in.slot) * *l.scaling->gemm_scale_inv(l.slot + 1),
               in.xc.data<float>(), l.wc.data<float>(), 0.0f, y);
      break;
    }
    case LinearPrecision::Fp8Block:
      linear_block_forward(c, l, x, training);
      break;
  }
  if (next.deferred) return;
  apply_epilogue(l);
  if (next.out == nullptr) return;
  // Dropout, then the residual sum, each rounded as its own op.
  std::span<float> o = next.out->span<float>();
  const std::optional<DropoutMask> mask = dropout_mask(c, next.dropout);
  if (mask) {
    dropout_forward(*mask, next.dropout.rate, bf16, l.y.span<float>(), o);
  } else {
    std::copy_n(y, rows * out, o.begin());
  }
  if (next.residual != nullptr) {
    const float* res = next.residual->data<float>();
    const int64_t n = rows * out;
#pragma omp parallel for schedule(static) if (n >= 65536)
    for (int64_t i = 0; i < n; ++i) o[i] = bf16 ? round_bf16(res[i] + o[i]) : res[i] + o[i];
  }
}

void cpu_backward(Context& c, const LinearGradient& lg) {
  LinearOp& l = *lg.linear;
  const int64_t rows = l.rows, in = l.in, out = l.out;
  const bool bf16 = l.precision != LinearPrecision::Fp32;
  sized(l.g, {rows, out}, DType::F32, Device::Cpu);
  sized(l.dx, {rows, in}, DType::F32, Device::Cpu);  // sized even without input_gradient: a stable buffer
  float* g = l.g.data<float>();
  const float* y = l.y.data<float>();
  const float* pre = l.activation == Activation::Gelu ? l.pre.data<float>() : nullptr;
  const float* dy = lg.dy->data<float>();
  const std::optional<DropoutMask> mask = dropout_mask(c, lg.dropout);
  if (mask) {  // back through the dropout first (into g; the mask below reads it in place)
    dropout_backward(*mask, lg.dropout.rate, bf16, lg.dy->span<float>(), l.g.span<float>());
    dy = g;
  }
  // The ReLU mask (from the unquantized forward output; relu'(0) = 0 as in JAX) or GELU's derivative
  // at its input (times dy, float32), and the bias
  // gradient from the unquantized dy, float32: partial sums over fixed pieces of rows, added in
  // piece order, so the result does not depend on the thread count.
  constexpr int64_t kRowsPerPiece = LinearOp::kBiasGradientOrder.rows_per_piece;
  const int64_t pieces = LinearOp::kBiasGradientOrder.pieces(rows);
  sized(l.partials, {pieces, out}, DType::F32, Device::Cpu);
  float* partials = l.partials.data<float>();
#pragma omp parallel for schedule(static) if (rows * out >= 65536)
  for (int64_t p = 0; p < pieces; ++p) {
    float* __restrict db = partials + p * out;
    std::fill(db, db + out, 0.0f);
    for (int64_t r = p * kRowsPerPiece; r < std::min(rows, (p + 1) * kRowsPerPiece); ++r) {
      const float* yr = y + r * out;
      const float* dyr = dy + r * out;
      float* gr = g + r * out;
      for (int64_t o = 0; o < out; ++o) {
        switch (l.activation) {
          case Activation::None: gr[o] = dyr[o]; break;
          case Activation::Relu: gr[o] = yr[o] > 0.0f ? dyr[o] : 0.0f; break;
          case Activation::Gelu: gr[o] = dyr[o] * gelu_grad(pre[r * out + o]); break;
        }
        db[o] += gr[o];
      }
    }
  }
  float* bias_grad = l.db != nullptr ? l.db->data<float>() : nullptr;
  for (int64_t o = 0; bias_grad != nullptr && o < out; ++o) {
    float sum = 0.0f;
    for (int64_t p = 0; p < pieces; ++p) sum += partials[p * out + o];
    bias_grad[o] = sum;
  }

  float* dx = l.dx.data<float>();
  float* dw = l.dw->data<float>();
  // dx [rows, in] = g [rows, out] W^T; dW = x^T [in, rows] g ([in, out]) or its transpose g^T x.
  const bool out_in = l.layout == LinearOp::Layout::OutIn;
  const GemmShape dgrad{rows, in, out, false, !out_in};
  auto wgrad = [&](float alpha, const float* x, const float* gr) {
    if (out_in) {
      gemm_f32({out, in, rows, true, false}, alpha, gr, x, 0.0f, dw);
    } else {
      gemm_f32({in, out, rows, true, false}, alpha, x, gr, 0.0f, dw);
    }
  };
  switch (l.precision) {
    case LinearPrecision::Fp32:
      if (lg.input_gradient) gemm_f32(dgrad, 1.0f, g, l.w->data<float>(), 0.0f, dx);
      wgrad(1.0f, l.x->data<float>(), g);
      break;
    case LinearPrecision::Bf16:
      round_bf16(l.g.span<float>(), l.g.span<float>());
      if (lg.input_gradient) gemm_f32(dgrad, 1.0f, g, l.wc.data<float>(), 0.0f, dx);
      wgrad(1.0f, l.xc.data<float>(), g);
      break;
    case LinearPrecision::Fp8: {
      const float g_scale_inv = cast_fp8(*l.scaling, l.slot + 2, l.g.span<float>(), true, l.gc_t, l.gc, c);
      record_health(c, l, l.slot + 2, l.g, true);
      const LinearOp& in = l.input_owner();  // whose cast of x the forward read
      const float x_scale_inv = *l.scaling->gemm_scale_inv(in.slot);
      const float w_scale_inv = *l.scaling->gemm_scale_inv(l.slot + 1);
      if (lg.input_gradient)
        gemm_f32(dgrad, g_scale_inv * w_scale_inv, l.gc.data<float>(), l.wc.data<float>(), 0.0f, dx);
      wgrad(x_scale_inv * g_scale_inv, in.xc.data<float>(), l.gc.data<float>());
      break;
    }
    case LinearPrecision::Fp8Block:
      linear_block_backward(c, l, l.g, lg.input_gradient);
      break;
  }
}

}  // namespace

void linear_prepare_weights(Context& c, std::span<LinearOp* const> linears, bool training) {
  for (LinearOp* l : linears) {
    check_linear(c, *l);
    l->prepared_input = nullptr;  // a new step: inputs are prepared anew
  }
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    // One batched launch per precision: a model's Linears may differ (per-Linear recipes).
    for (const LinearPrecision p : {LinearPrecision::Fp32, LinearPrecision::Bf16, LinearPrecision::Fp8,
                                    LinearPrecision::Fp8Block}) {
      std::vector<LinearOp*> same;
      for (LinearOp* l : linears)
        if (l->precision == p) same.push_back(l);
      if (!same.empty()) cuda_linear_prepare_weights(c, same, training);
    }
#endif
    return;
  }
  for (LinearOp* l : linears) cpu_prepare_weights(c, *l, training);
}

void linear_prepare_input(Context& c, LinearOp& l, const Tensor& x, bool training) {
  check_linear(c, l);
  FP8KIT_CHECK(x.numel() % l.in == 0, "linear: the input has {} values, not rows of {}", x.numel(), l.in);
  check_tensor(c, x, x.shape(), DType::F32, "linear_prepare_input", "the input (an input shared or prepared ahead)");
  if (l.precision == LinearPrecision::Fp8Block) {
    linear_block_prepare_input(c, l, x, training);
    return;
  }
  const bool fp8 = fp8_input_shareable(l);
  if (fp8 && !c.is_cuda()) {  // the forward's cast, its amax recorded as the forward would
    cast_fp8(*l.scaling, l.slot, x.span<float>(), training, l.xc_t, l.xc, c);
    l.prepared_input = &x;
    return;
  }
  if (!c.is_cuda() || (l.precision != LinearPrecision::Bf16 && !fp8)) return;
#if FP8KIT_HAVE_CUDA
  cuda_linear_prepare_input(c, l, x, training);
#endif
}

bool shares_input_operands(const LinearOp& a, const LinearOp& b) {
  if (a.precision != b.precision) return false;
  if (a.precision == LinearPrecision::Bf16) return true;
  if (a.precision == LinearPrecision::Fp8)
    return fp8_input_shareable(a) && fp8_input_shareable(b) && a.scaling == b.scaling &&
           a.scaling->format(a.slot) == b.scaling->format(b.slot);
  return a.precision == LinearPrecision::Fp8Block &&
         a.block_recipe.forward_format == b.block_recipe.forward_format &&
         a.block_recipe.scale_options == b.block_recipe.scale_options;
}

namespace {

// Whether l's forward reads a bf16 x as it is: the GPU's bf16 and FP8 casts of a Linear's own input,
// but for FP8's one-launch quantize + GEMM and its health statistics (both read f32).
bool reads_bf16_input(const Context& c, const LinearOp& l, bool training) {
  return c.is_cuda() && l.input_of == nullptr &&
         (l.precision == LinearPrecision::Bf16 ||
          (l.precision == LinearPrecision::Fp8 && !(training && l.scaling->recording()) &&
           !cuda::quantize_fp8_gemm_fits(l.in, l.out)));
}

// An input or output gradient of f32 or bf16: t itself where it is f32 or the path reads bf16, else
// its values as f32 in `f32`.
const Tensor& f32_unless(Context& c, const Tensor& t, bool bf16_read, Tensor& f32) {
  if (t.dtype() == DType::F32 || bf16_read) return t;
  convert(c, t, DType::F32, f32);
  return f32;
}

// linear_forward's checks and dispatch; gated (GPU only): x is its gate.
void forward(Context& c, LinearOp& l, const Tensor& given, bool training, const LinearOutput& next, LinearOp* producer,
             const GatedInput* gated) {
  check_linear(c, l);
  FP8KIT_CHECK(!next.deferred || next.out == nullptr, "linear: a deferred output has no dropout or residual sum");
  FP8KIT_CHECK(producer == nullptr || &given == &producer->y, "linear: a producer's deferred output is its y");
  FP8KIT_CHECK(given.rank() >= 1 && given.numel() % l.in == 0, "linear: the input has {} values, not rows of {}",
               given.numel(), l.in);
  FP8KIT_CHECK(given.dtype() == DType::F32 || given.dtype() == DType::Bf16, "linear: the input must be f32 or bf16, got {}",
               name(given.dtype()));
  check_tensor(c, given, given.shape(), given.dtype(), "linear", "the input");
  const Tensor& x = f32_unless(c, given, reads_bf16_input(c, l, training), l.x_f32);
  l.x = &x;
  l.rows = x.numel() / l.in;
  if (next.out != nullptr) {
    prepare_output(c, *next.out, {l.rows, l.out}, DType::F32, "linear", "the output");
    if (next.residual != nullptr) check_tensor(c, *next.residual, {l.rows, l.out}, DType::F32, "linear", "the residual");
  }
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    cuda_linear_forward(c, l, x, training, next, producer, gated);
#endif
    return;
  }
  cpu_forward(c, l, x, training, next, producer);
}

// Whether SwiGLU's forward can run inside l's input cast: the GPU's bf16 and FP8 Linears that cast
// their own input, unless FP8 health statistics (which read the input itself) are being recorded.
bool gate_fusable(const Context& c, const LinearOp& l, bool training) {
  return c.is_cuda() && l.input_of == nullptr &&
         (l.precision == LinearPrecision::Bf16 ||
          (l.precision == LinearPrecision::Fp8 && !(training && l.scaling->recording())));
}

// Whether SwiGLU's backward can run inside l's gradient cast: the GPU's bf16 and FP8 Linears, whose
// output gradient has no bias sum to make.
bool swiglu_fusable(const Context& c, const LinearOp& l) {
  return c.is_cuda() && (l.precision == LinearPrecision::Bf16 || l.precision == LinearPrecision::Fp8) &&
         l.db == nullptr;
}

}  // namespace

void linear_forward(Context& c, LinearOp& l, const Tensor& x, bool training, const LinearOutput& next,
                    LinearOp* producer) {
  forward(c, l, x, training, next, producer, nullptr);
}

void linear_forward(Context& c, LinearOp& l, const GatedInput& x, bool training, const LinearOutput& next) {
  FP8KIT_CHECK(x.gate != nullptr && x.up != nullptr && x.act != nullptr,
               "linear: a gated input needs gate, up and act");
  check_linear(c, l);  // before gate_fusable reads its scaling table
  if (!gate_fusable(c, l, training)) {
    swiglu_forward(c, *x.gate, *x.up, x.bf16, *x.act);
    forward(c, l, *x.act, training, next, nullptr, nullptr);
    return;
  }
  check_tensor(c, *x.gate, x.gate->shape(), DType::F32, "linear", "a gated input's gate");
  check_tensor(c, *x.up, x.gate->shape(), DType::F32, "linear", "a gated input's up (its gate's shape)");
  forward(c, l, *x.gate, training, next, nullptr, &x);
}

namespace {

// linear_finish's checks and its work (after them) in place.
void check_finish(const Context& c, std::span<LinearOp* const> linears) {
  FP8KIT_CHECK(linears.size() <= 4, "linear_finish: at most 4 Linears at a time, got {}", linears.size());
  for (LinearOp* l : linears) check_linear(c, *l);
}

void finish_in_place(Context& c, std::span<LinearOp* const> linears) {
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    cuda_linear_finish(c, linears);
#endif
    return;
  }
  for (LinearOp* l : linears) apply_epilogue(*l);
}

}  // namespace

void linear_finish(Context& c, std::span<LinearOp* const> linears) {
  check_finish(c, linears);
  finish_in_place(c, linears);
}

void linear_finish(Context& c, std::span<LinearOp* const> linears, DType dtype, std::span<Tensor* const> outs) {
  FP8KIT_CHECK(linears.size() == outs.size(), "linear_finish: {} Linears and {} outputs", linears.size(), outs.size());
  FP8KIT_CHECK(dtype == DType::F32 || dtype == DType::Bf16, "linear_finish: into f32 or bf16, not {}", name(dtype));
  check_finish(c, linears);
  for (size_t i = 0; i < linears.size(); ++i) {
    FP8KIT_CHECK(linears[i]->y.numel() == linears[i]->rows * linears[i]->out,
                 "linear_finish needs the Linear's forward first");
    FP8KIT_CHECK(outs[i] != &linears[i]->y && !outs[i]->shares_storage(linears[i]->y),
                 "linear_finish: an output must not be the Linear's y");
  }
  if (c.is_cuda() && dtype == DType::Bf16) {
    for (size_t i = 0; i < linears.size(); ++i)
      prepare_output(c, *outs[i], {linears[i]->rows, linears[i]->out}, dtype, "linear_finish", "out");
#if FP8KIT_HAVE_CUDA
    cuda_linear_finish(c, linears, outs);
#endif
    return;
  }
  finish_in_place(c, linears);
  for (size_t i = 0; i < linears.size(); ++i) convert(c, linears[i]->y, dtype, *outs[i]);
}

void linear_backward(Context& c, std::span<const LinearGradient> group) {
  FP8KIT_CHECK(!group.empty() && group.size() <= 3, "linear backward: 1 to 3 Linears at a time, got {}", group.size());
  for (const LinearGradient& lg : group) {
    FP8KIT_CHECK(lg.linear != nullptr && lg.linear->x != nullptr,
                 "linear backward needs the Linear's forward first");
    const LinearOp& l = *lg.linear;
    const LinearOp& first = *group[0].linear;
    FP8KIT_CHECK(l.rows == first.rows && l.in == first.in && l.out == first.out,
                 "linear backward: the Linears of a group must have one shape");
    FP8KIT_CHECK((l.db == nullptr) == (first.db == nullptr),
                 "linear backward: the Linears of a group have bias gradients all or none (go one by one)");
    FP8KIT_CHECK(lg.dy->dtype() == DType::F32 || lg.dy->dtype() == DType::Bf16,
                 "linear backward: the output gradient must be f32 or bf16, got {}", name(lg.dy->dtype()));
    check_tensor(c, *lg.dy, {l.rows, l.out}, lg.dy->dtype(), "linear backward", "the output gradient");
    if (lg.dx_bf16 != nullptr && lg.input_gradient)
      prepare_output(c, *lg.dx_bf16, {l.rows, l.in}, DType::Bf16, "linear backward", "dx_bf16");
    FP8KIT_CHECK(lg.swiglu == SwiGluPart::None || swiglu_fusable(c, l),
                 "linear backward: SwiGLU's gradient is fused on the GPU only, into bf16 or FP8 Linears without bias "
                 "(linear_backward_gated)");
  }
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    // The GPU's group runs one precision; Linears of a group that differ (per-Linear recipes) go one
    // by one, each on its lane as the group would have run it.
    const bool one_precision = std::all_of(group.begin(), group.end(), [&](const LinearGradient& g) {
      return g.linear->precision == group[0].linear->precision;
    });
    if (one_precision) {
      cuda_linear_backward(c, group);
    } else {
      for (const LinearGradient& g : group) cuda_linear_backward(c, {&g, 1});
    }
#endif
    return;
  }
  for (LinearGradient lg : group) {
    lg.dy = &f32_unless(c, *lg.dy, false, lg.linear->dy_f32);
    cpu_backward(c, lg);
    if (lg.dx_bf16 != nullptr && lg.input_gradient) convert(c, lg.linear->dx, DType::Bf16, *lg.dx_bf16);
  }
}

void linear_backward_gated(Context& c, LinearOp& gate, LinearOp& up, const Tensor& dact, Tensor& dgate, Tensor& dup,
                           Lane up_lane) {
  if (!swiglu_fusable(c, gate) || !swiglu_fusable(c, up) || gate.precision != up.precision) {
    swiglu_backward(c, gate.y, up.y, dact, dgate, dup);
    const LinearGradient group[] = {{&gate, &dgate, {}, Lane::Main}, {&up, &dup, {}, up_lane}};
    linear_backward(c, group);
    return;
  }
  check_tensor(c, up.y, gate.y.shape(), DType::F32, "linear_backward_gated", "up's output (gate's shape)");
  LinearGradient group[] = {{&gate, &dact, {}, Lane::Main}, {&up, &dact, {}, up_lane}};
  group[0].swiglu = SwiGluPart::Gate;
  group[1].swiglu = SwiGluPart::Up;
  for (LinearGradient& g : group) {
    g.gate = &gate.y;
    g.up = &up.y;
  }
  linear_backward(c, group);
}

}  // namespace fp8kit::ops
