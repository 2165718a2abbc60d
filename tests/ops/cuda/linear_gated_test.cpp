// SwiGLU fused into the Linears around it on the GPU (the Llama MLP's gate, up and down projections):
// silu(gate) up inside down's input cast (ops::GatedInput) and SwiGLU's backward inside gate's and up's
// gradient casts (ops::linear_backward_gated), against swiglu_forward / swiglu_backward and the Linears
// on their outputs: the same bits.
#include "ops/cuda/gpu_test.h"
#include "ops/cuda/op_table.h"
#include "ops/linear.h"
#include "ops/scaling_table.h"
#include "ops/swiglu.h"

#include <gtest/gtest.h>

#include <cstring>
#include <deque>
#include <optional>
#include <string>

namespace fp8kit::ops {
namespace {

struct Shape {
  int64_t rows, hidden, ffn;
};

std::vector<float> host(const Tensor& t) {
  const Tensor h = t.to(Device::Cpu);
  return {h.data<float>(), h.data<float>() + h.numel()};
}

struct Result {
  std::vector<std::vector<float>> tensors;  // down's y, gate's and up's dx, the three dW, the scaling state
  std::vector<std::string> names{"down's y", "gate's dx", "up's dx", "gate's dW", "up's dW", "down's dW"};
  bool wrote_swiglu = false;  // act, dgate or dup written
};

// Two training steps (delayed scaling's second uses the first's amaxes) of gate, up [hidden -> ffn] and
// down [ffn -> hidden] (precision p; FP8 scaled as `mode` says), fused or not; the second's results.
Result run(const Shape& s, LinearPrecision p, ScalingMode mode, bool fused) {
  Context c(Device::Cuda);
  const Tensor x = testing::device_tensor(testing::random_values(s.rows * s.hidden, 51, -2.0f, 2.0f),
                                          {s.rows, s.hidden}, Device::Cuda);
  const Tensor dy = testing::device_tensor(testing::random_values(s.rows * s.hidden, 52), {s.rows, s.hidden},
                                           Device::Cuda);
  std::deque<Tensor> params;
  std::optional<ScalingTable> scaling;
  if (p == LinearPrecision::Fp8) {
    Fp8Recipe recipe;
    recipe.mode = mode;
    recipe.amax_history_length = 16;
    scaling.emplace(recipe);
  }
  LinearOp gate, up, down;
  LinearOp* all[] = {&gate, &up, &down};
  for (int k = 0; k < 3; ++k) {
    LinearOp& l = *all[k];
    l.in = k == 2 ? s.ffn : s.hidden;
    l.out = k == 2 ? s.hidden : s.ffn;
    l.layout = LinearOp::Layout::OutIn;
    l.precision = p;
    l.w = &params.emplace_back(testing::device_tensor(testing::random_values(l.in * l.out, 53 + k, -0.3f, 0.3f),
                                                      {l.out, l.in}, Device::Cuda));
    l.dw = &params.emplace_back(l.w->shape(), DType::F32, Device::Cuda);
    if (scaling) {
      l.scaling = &*scaling;
      l.slot = scaling->add_linear("l" + std::to_string(k));
    }
  }
  if (scaling) scaling->allocate(Device::Cuda);
  Tensor act, dgate, dup;
  for (int step = 0; step < 2; ++step) {
    linear_prepare_weights(c, all, true);
    linear_forward(c, gate, x, true);
    linear_forward(c, up, x, true);
    if (fused) {
      linear_forward(c, down, GatedInput{&gate.y, &up.y, true, &act}, true);
    } else {
      swiglu_forward(c, gate.y, up.y, true, act);
      linear_forward(c, down, act, true);
    }
    const LinearGradient g{&down, &dy};
    linear_backward(c, {&g, 1});
    if (fused) {
      linear_backward_gated(c, gate, up, down.dx, dgate, dup, Lane::A);
    } else {
      swiglu_backward(c, gate.y, up.y, down.dx, dgate, dup);
      const LinearGradient group[] = {{&gate, &dgate, {}, Lane::Main}, {&up, &dup, {}, Lane::A}};
      linear_backward(c, group);
    }
    c.join_all();  // the wgrads on lanes A and Side read this step's scales, which the update replaces
    if (scaling) scaling->update(c);
  }
  c.synchronize();  // the copies below do not wait for the context's streams
  Result r;
  for (const Tensor* t : {&down.y, &gate.dx, &up.dx, gate.dw, up.dw, down.dw}) r.tensors.push_back(host(*t));
  if (scaling)
    for (const ScalingStateView& v : scaling->state()) {
      r.tensors.push_back(host(*v.tensor));
      r.names.push_back(v.name);
    }
  r.wrote_swiglu = act.numel() + dgate.numel() + dup.numel() > 0;
  return r;
}

// Shapes: multiples of 4 everywhere (vector loads, the wide bf16 tiles), odd widths (scalar loads, the
// 32 x 32 bf16 tiles, FP8's small GEMM), an MLP's width, and one whose FP8 casts quantize and multiply
// in one launch (forward and dgrad).
TEST(CudaLinear, SwiGluFusedIntoTheLinearsCastsGivesTheUnfusedBits) {
  FP8KIT_REQUIRE_GPU();
  const Shape shapes[] = {{96, 128, 256}, {33, 40, 37}, {64, 256, 1376}, {40, 64, 64}};
  struct Config {
    LinearPrecision precision;
    ScalingMode mode;
    const char* name;
  };
  const Config configs[] = {{LinearPrecision::Bf16, ScalingMode::Delayed, "bf16"},
                            {LinearPrecision::Fp8, ScalingMode::Delayed, "fp8 delayed"},
                            {LinearPrecision::Fp8, ScalingMode::Current, "fp8 current"}};
  for (const Shape& s : shapes)
    for (const Config& config : configs) {
      const std::string what = std::to_string(s.rows) + "x" + std::to_string(s.hidden) + "x" + std::to_string(s.ffn) +
                               " " + config.name;
      const Result fused = run(s, config.precision, config.mode, true);
      const Result unfused = run(s, config.precision, config.mode, false);
      ASSERT_EQ(fused.tensors.size(), unfused.tensors.size());
      for (size_t k = 0; k < fused.tensors.size(); ++k) {
        const std::vector<float>& a = fused.tensors[k];
        const std::vector<float>& b = unfused.tensors[k];
        ASSERT_EQ(a.size(), b.size()) << what << ": " << fused.names[k];
        for (size_t i = 0; i < a.size(); ++i)
          if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0) {
            ADD_FAILURE() << what << ": " << fused.names[k] << " [" << i << "] " << a[i] << " fused, " << b[i]
                          << " unfused";
            break;
          }
      }
      EXPECT_FALSE(fused.wrote_swiglu) << what << ": the fused steps wrote act, dgate or dup";
      EXPECT_TRUE(unfused.wrote_swiglu) << what;
    }
}

}  // namespace
}  // namespace fp8kit::ops
