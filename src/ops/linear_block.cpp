// The Linear op's Fp8Block precision: 1 x 128 and 128 x 128 quantizations and their block-scaled
// GEMMs, queued on the context, the same calls on the CPU and the GPU.
#include "ops/linear_block.h"

#include "base/error.h"
#include "ops/matmul.h"
#include "ops/quantize.h"
#include "ops/tensor_checks.h"

#if FP8KIT_HAVE_CUDA
#include "ops/cuda/context.h"
#include "ops/cuda/elementwise.h"
#endif

namespace fp8kit::ops {

namespace {

bool out_in(const LinearOp& l) { return l.layout == LinearOp::Layout::OutIn; }

// 1 x 128 groups along a matrix's columns, in `format`.
QuantSpec groups(const LinearOp& l, Fp8Format format) {
  return {.format = format, .granularity = Granularity::PerGroup, .group = 128,
          .options = l.block_recipe.scale_options};
}

// out [cols, rows] = x [rows, cols]^T, f32, on c's current lane.
void transpose_f32(Context& c, const Tensor& x, int64_t rows, int64_t cols, Tensor& out) {
  sized(out, {cols, rows}, DType::F32, c.device());
  if (c.is_cuda()) {
#if FP8KIT_HAVE_CUDA
    const cuda::Transpose t{x.device_data<float>(), rows, cols, out.device_data<float>()};
    cuda::transpose({&t, 1}, stream(c));
#endif
    return;
  }
  const float* in = x.data<float>();
  float* o = out.data<float>();
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < cols; ++k) o[k * rows + r] = in[r * cols + k];
}

// l.xq = x quantized 1 x 128 along in; when training, l.xq_t = x^T quantized 1 x 128 along the rows.
void quantize_input(Context& c, LinearOp& l, const Tensor& x, bool training) {
  const int64_t rows = x.numel() / l.in;
  const Tensor matrix = x.view(0, {rows, l.in});
  const QuantSpec spec = groups(l, l.block_recipe.forward_format);
  quantize(c, matrix, spec, l.xq);
  if (!training) return;
  transpose_f32(c, matrix, rows, l.in, l.xc_t);
  quantize(c, l.xc_t, spec, l.xq_t);
}

}  // namespace

void linear_block_prepare_weights(Context& c, LinearOp& l) {
  const Tensor w = out_in(l) ? l.w->view(0, {l.out, l.in}) : l.w->view(0, {l.in, l.out});
  const QuantSpec blocks{.format = l.block_recipe.forward_format, .granularity = Granularity::Block128x128,
                         .options = l.block_recipe.scale_options};
  quantize(c, w, blocks, l.wq, nullptr, true);
  transpose(c, l.wq, l.wq_t);
}

void linear_block_prepare_input(Context& c, LinearOp& l, const Tensor& x, bool training) {
  quantize_input(c, l, x, training);
  l.prepared_input = &x;
}

void linear_block_forward(Context& c, LinearOp& l, const Tensor& x, bool training) {
  LinearOp& owner = l.input_owner();
  if (owner.prepared_input != &x) {  // (not marked prepared: a later forward of new values quantizes again)
    FP8KIT_CHECK(l.input_of == nullptr,
                 "linear: a Linear sharing another's input quantization must see the same input, prepared first");
    quantize_input(c, l, x, training);
  }
  // fprop's b is W [out, in]: the stored OutIn weight, or an InOut one's transpose.
  matmul(c, owner.xq, out_in(l) ? l.wq : l.wq_t, l.y);
}

void linear_block_backward(Context& c, LinearOp& l, const Tensor& g, bool input_gradient) {
  const QuantSpec spec = groups(l, l.block_recipe.backward_format);
  if (input_gradient) {
    quantize(c, g, spec, l.gq);
    // dgrad's b is W^T [in, out]: the stored InOut weight, or an OutIn one's transpose.
    matmul(c, l.gq, out_in(l) ? l.wq_t : l.wq, l.dx);
  }
  // g^T on this lane: the caller may write g again once this returns (the Llama's gradient buffers,
  // which its blocks share), so the side lane reads only l's own copy.
  transpose_f32(c, g, l.rows, l.out, l.gc_t);
  c.fork(Lane::Side);
  const Context::OnLane side(c, Lane::Side);
  quantize(c, l.gc_t, spec, l.gq_t);
  const QTensor& x_t = l.input_owner().xq_t;
  if (out_in(l)) {  // dW [out, in] = g^T x
    Tensor dw = l.dw->view(0, {l.out, l.in});
    matmul(c, l.gq_t, x_t, dw);
  } else {  // dW [in, out] = x^T g
    Tensor dw = l.dw->view(0, {l.in, l.out});
    matmul(c, x_t, l.gq_t, dw);
  }
}

}  // namespace fp8kit::ops
