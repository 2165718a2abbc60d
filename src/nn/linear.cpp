// Linear layer forward/backward under the fp32, bf16 and fp8 policies (see linear.h).
#include "nn/linear.h"

#include "base/error.h"
#include "numerics/cast.h"
#include "numerics/convert.h"
#include "ops/gemm.h"

#include <algorithm>

namespace fp8kit::nn {

Linear::Linear(std::string path, int64_t in, int64_t out, std::vector<int64_t> kernel_shape,
               std::vector<int64_t> bias_shape, Activation activation)
    : path_(std::move(path)), in_(in), out_(out), activation_(activation) {
  FP8KIT_CHECK(numel(kernel_shape) == in * out, "{}: kernel shape has {} elements, expected {} x {}", path_,
               numel(kernel_shape), in, out);
  FP8KIT_CHECK(numel(bias_shape) == out, "{}: bias shape has {} elements, expected {}", path_, numel(bias_shape), out);
  kernel = {path_ + "/kernel", std::move(kernel_shape), std::vector<float>(in * out), std::vector<float>(in * out)};
  bias = {path_ + "/bias", std::move(bias_shape), std::vector<float>(out), std::vector<float>(out)};
  xq_ = Tensor({0}, DType::E4M3);
  wq_ = Tensor({in, out}, DType::E4M3);
  gq_ = Tensor({0}, DType::E5M2);
  w_bf16_ = Tensor({in, out}, DType::F32);
  w_values_ = Tensor({in, out}, DType::F32);
}

std::string Linear::name() const {
  const size_t slash = path_.rfind('/');
  return slash == std::string::npos ? path_ : path_.substr(slash + 1);
}

void Linear::set_precision(Precision precision, const Fp8Recipe& recipe) {
  precision_ = precision;
  recipe_ = recipe;
  FP8KIT_CHECK(recipe.amax_history_length > 0, "the amax history length must be at least 1");
  const size_t length = precision == Precision::Fp8 ? recipe.amax_history_length : 1;
  scaling_ = {ScalingState(length), ScalingState(length), ScalingState(length)};
  frozen_ = ScalingState(length);
}

float Linear::quantize(ScalingState& state, Fp8Format format, std::span<const float> x, bool training, Tensor& out) {
  out.resize({static_cast<int64_t>(x.size())});
  const float current = recipe_.mode == ScalingMode::Current ? amax(x) : 0.0f;
  ScalingState& used = training ? state : frozen_;
  if (!training) frozen_ = state;  // evaluation: the next step's scale, without touching the state
  used.scale_for_step(recipe_, format, current);
  const float tensor_amax = quantize_for_step(used, recipe_, x, format, out.span<uint8_t>());
  const float scale_inv = used.scale_inv(recipe_);
  if (training) state.record_amax(tensor_amax, recipe_, format);
  return scale_inv;
}

std::span<const float> Linear::forward(std::span<const float> x, int64_t rows, bool training) {
  FP8KIT_CHECK(static_cast<int64_t>(x.size()) == rows * in_, "{}: input has {} values, expected {} rows x {}", path_,
               x.size(), rows, in_);
  x_ = x.data();
  rows_ = rows;
  y_.resize({rows, out_});
  float* y = y_.data<float>();
  const ops::GemmShape shape{rows, out_, in_};
  const bool bf16_out = precision_ != Precision::Fp32;
  switch (precision_) {
    case Precision::Fp32:
      ops::gemm_f32(shape, 1.0f, x.data(), kernel.value.data(), 0.0f, y);
      break;
    case Precision::Bf16:
      x_bf16_.resize({rows, in_});
      round_bf16(x, x_bf16_.span<float>());
      round_bf16(kernel.value, w_bf16_.span<float>());
      ops::gemm_f32(shape, 1.0f, x_bf16_.data<float>(), w_bf16_.data<float>(), 0.0f, y);
      break;
    case Precision::Fp8: {
      const Fp8Format format = recipe_.forward_format;
      used_.inputs = quantize(scaling_.inputs, format, x, training, xq_);
      used_.kernel = quantize(scaling_.kernel, format, kernel.value, training, wq_);
      // ops::gemm_fp8's computation, with each operand decoded once for fprop, dgrad and wgrad.
      x_values_.resize({rows, in_});
      ops::decode_fp8(xq_.span<uint8_t>(), format, x_values_.span<float>());
      ops::decode_fp8(wq_.span<uint8_t>(), format, w_values_.span<float>());
      ops::gemm_f32(shape, used_.inputs * used_.kernel, x_values_.data<float>(), w_values_.data<float>(), 0.0f, y);
      break;
    }
  }
  // Bias and activation. Mixed bf16 as Keras: bf16(bf16(x W) + bf16(b)), then ReLU.
  const float* b = bias.value.data();
  const bool relu = activation_ == Activation::Relu;
  const int64_t n = out_;
#pragma omp parallel for schedule(static) if (rows * n >= 65536)
  for (int64_t r = 0; r < rows; ++r) {
    float* yr = y + r * n;
    for (int64_t o = 0; o < n; ++o) {
      float v = bf16_out ? round_bf16(round_bf16(yr[o]) + round_bf16(b[o])) : yr[o] + b[o];
      yr[o] = relu ? std::max(v, 0.0f) : v;
    }
  }
  return y_.span<float>();
}

std::span<const float> Linear::backward(std::span<const float> dy) {
  const int64_t rows = rows_;
  FP8KIT_CHECK(static_cast<int64_t>(dy.size()) == rows * out_, "{}: gradient has {} values, expected {} rows x {}",
               path_, dy.size(), rows, out_);
  dy_.resize({rows, out_});
  dx_.resize({rows, in_});
  float* g = dy_.data<float>();
  const float* y = y_.data<float>();
  const bool relu = activation_ == Activation::Relu;
  const int64_t n = out_;
  // The ReLU mask (from the unquantized forward output; relu'(0) = 0 as in JAX), and the bias
  // gradient from the unquantized dy, float32: partial sums over fixed pieces of rows, added in
  // piece order, so the result does not depend on the thread count.
  constexpr int64_t kRowsPerPiece = kBiasGradientOrder.rows_per_piece;
  const int64_t pieces = kBiasGradientOrder.pieces(rows);
  bias_partials_.resize({pieces, n});
  float* partials = bias_partials_.data<float>();
#pragma omp parallel for schedule(static) if (rows * n >= 65536)
  for (int64_t p = 0; p < pieces; ++p) {
    float* __restrict db = partials + p * n;
    std::fill(db, db + n, 0.0f);
    for (int64_t r = p * kRowsPerPiece; r < std::min(rows, (p + 1) * kRowsPerPiece); ++r) {
      const float* __restrict yr = y + r * n;
      const float* __restrict dyr = dy.data() + r * n;
      float* __restrict gr = g + r * n;
      for (int64_t o = 0; o < n; ++o) {
        gr[o] = relu && !(yr[o] > 0.0f) ? 0.0f : dyr[o];
        db[o] += gr[o];
      }
    }
  }
  for (int64_t o = 0; o < n; ++o) {
    float sum = 0.0f;
    for (int64_t p = 0; p < pieces; ++p) sum += partials[p * n + o];
    bias.grad[o] = sum;
  }

  float* dx = dx_.data<float>();
  float* dw = kernel.grad.data();
  const ops::GemmShape dgrad{rows, in_, out_, false, true};  // dx [rows, in] = dy [rows, out] W^T
  const ops::GemmShape wgrad{in_, out_, rows, true, false};  // dW [in, out] = x^T [in, rows] dy
  switch (precision_) {
    case Precision::Fp32:
      ops::gemm_f32(dgrad, 1.0f, g, kernel.value.data(), 0.0f, dx);
      ops::gemm_f32(wgrad, 1.0f, x_, g, 0.0f, dw);
      break;
    case Precision::Bf16:
      round_bf16(dy_.span<float>(), dy_.span<float>());
      ops::gemm_f32(dgrad, 1.0f, g, w_bf16_.data<float>(), 0.0f, dx);
      ops::gemm_f32(wgrad, 1.0f, x_bf16_.data<float>(), g, 0.0f, dw);
      break;
    case Precision::Fp8: {
      const Fp8Format bwd = recipe_.backward_format;
      used_.outputs_grad = quantize(scaling_.outputs_grad, bwd, dy_.span<float>(), true, gq_);
      g_values_.resize({rows, out_});
      ops::decode_fp8(gq_.span<uint8_t>(), bwd, g_values_.span<float>());
      const float* gv = g_values_.data<float>();
      ops::gemm_f32(dgrad, used_.outputs_grad * used_.kernel, gv, w_values_.data<float>(), 0.0f, dx);
      ops::gemm_f32(wgrad, used_.inputs * used_.outputs_grad, x_values_.data<float>(), gv, 0.0f, dw);
      break;
    }
  }
  return dx_.span<float>();
}

std::vector<StateEntry> Linear::fp8_state() {
  if (precision_ != Precision::Fp8) return {};
  const bool keras = recipe_.mode == ScalingMode::Delayed && recipe_.lag == ScalingLag::Keras;
  std::vector<StateEntry> entries;
  auto add = [&](const char* what, ScalingState& s) {
    float& scale = keras ? s.keras_multiplier : s.scale;
    entries.push_back({path_ + "/" + what + "_scale", {}, std::span<float>(&scale, 1), Domain::Positive});
    auto history = s.amax_history.values();
    entries.push_back(
        {path_ + "/" + what + "_amax_history", {static_cast<int64_t>(history.size())}, history, Domain::NonNegative});
  };
  add("inputs", scaling_.inputs);
  add("kernel", scaling_.kernel);
  add("outputs_grad", scaling_.outputs_grad);
  return entries;
}

}  // namespace fp8kit::nn
