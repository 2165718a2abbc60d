// Op table rows: the Linear op's forward and backward in both weight layouts (Keras's [in, out] and
// HF's [out, in]) and every precision, at a shape cuBLASLt takes and at one the small FP8 GEMM takes
// (out 16, in 48). GEMM sums differ in order between the devices (fp32: ~1e-5 relative); bf16 outputs
// may sit one bf16 step apart where a sum lies at a rounding boundary. FP8's fprop runs with Hopper's
// fast accumulation (as Transformer Engine's): a sum that cancels to near 0 keeps an error of ~1e-2 of
// the terms' scale (seen on the H100: 0.0195 for the CPU's 0.0156 among outputs of ~1), so FP8 rows
// bound the absolute error by 2e-2 of the outputs' scale (inputs in [-1, 1], weights in [-0.2, 0.2]).
// FP8 block scaling (fp8_block) runs the split accumulator (~2^-12 of the sum of |terms|, a few 1e-3
// here) with the same codes and scales on both devices: atol 2e-2, and rtol 2e-2 for y's bf16 step;
// its rows add a shape of partial groups and blocks (one row, in 200, out 130) and HF's Linear
// without a bias gradient.
#include "ops/cuda/op_table.h"
#include "ops/linear.h"
#include "ops/scaling_table.h"

#include <fmt/format.h>

#include <optional>

namespace fp8kit::testing {
namespace {

struct Shape {
  int64_t rows, in, out;
};
constexpr Shape kShapes[] = {{96, 256, 128}, {33, 48, 16}, {1, 200, 130}};

const RegisterOps rows([](std::vector<OpCase>& t) {
  using Layout = ops::LinearOp::Layout;
  using ops::LinearPrecision;
  for (const Shape s : kShapes)
    for (const Layout layout : {Layout::InOut, Layout::OutIn})
      for (const LinearPrecision p : {LinearPrecision::Fp32, LinearPrecision::Bf16, LinearPrecision::Fp8,
                                      LinearPrecision::Fp8Block})
        for (const bool bias_grad : {true, false}) {
          const bool block = p == LinearPrecision::Fp8Block;
          if ((s.rows == 1 || !bias_grad) && !block) continue;
          const char* pname = p == LinearPrecision::Fp32 ? "fp32"
                              : p == LinearPrecision::Bf16 ? "bf16"
                              : block                      ? "fp8_block"
                                                           : "fp8";
          const double rtol = p == LinearPrecision::Fp32 ? 1e-4 : p == LinearPrecision::Fp8 ? 0.15 : 2e-2;
          const double atol = p == LinearPrecision::Fp8 || block ? 2e-2 : 1e-5;
          t.push_back({fmt::format("linear/{}x{}x{}/{}/{}{}", s.rows, s.in, s.out,
                                   layout == Layout::OutIn ? "out_in" : "in_out", pname, bias_grad ? "" : "/no_db"),
                       [=](ops::Context& c) {
                         const Device d = c.device();
                         Tensor x = device_tensor(random_values(s.rows * s.in, 21), {s.rows, s.in}, d);
                         Tensor w = device_tensor(random_values(s.in * s.out, 22, -0.2f, 0.2f),
                                                  layout == Layout::OutIn ? std::vector<int64_t>{s.out, s.in}
                                                                          : std::vector<int64_t>{s.in, s.out},
                                                  d);
                         // Without a bias gradient (HF's Linear): a bias of zeros.
                         Tensor b = device_tensor(bias_grad ? random_values(s.out, 23) : std::vector<float>(s.out, 0.0f),
                                                  {s.out}, d);
                         Tensor dy = device_tensor(random_values(s.rows * s.out, 24), {s.rows, s.out}, d);
                         std::vector<Tensor> out(4);
                         out[2] = Tensor(w.shape(), DType::F32, d);
                         out[3] = Tensor({s.out}, DType::F32, d);
                         std::optional<ops::ScalingTable> scaling;
                         ops::LinearOp l;
                         l.in = s.in;
                         l.out = s.out;
                         l.layout = layout;
                         l.precision = p;
                         l.w = &w;
                         l.b = bias_grad ? &b : nullptr;
                         l.dw = &out[2];
                         l.db = bias_grad ? &out[3] : nullptr;
                         if (p == LinearPrecision::Fp8) {
                           scaling.emplace(Fp8Recipe{});
                           l.scaling = &*scaling;
                           l.slot = scaling->add("linear/inputs", Fp8Format::E4M3);
                           scaling->add("linear/kernel", Fp8Format::E4M3);
                           scaling->add("linear/outputs_grad", Fp8Format::E5M2);
                           scaling->allocate(d);
                         }
                         ops::LinearOp* op = &l;
                         ops::linear_prepare_weights(c, {&op, 1}, true);
                         ops::linear_forward(c, l, x, true);
                         const ops::LinearGradient g{&l, &dy};
                         ops::linear_backward(c, {&g, 1});
                         c.join_all();
                         out[0] = l.y.clone();
                         out[1] = l.dx.clone();
                         return out;
                       },
                       atol, rtol});
        }
});

}  // namespace
}  // namespace fp8kit::testing
