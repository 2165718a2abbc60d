// Op table rows: SwiGLU forward (f32, bf16) and backward, at one element, an odd shape and an MLP's
// width, with gates up to +-30 (exp overflowing nowhere, silu near 0 and near g). The same float32
// operations in the same order; expf differs from glibc's by up to ~2 ulp: ~1e-6 relative (bf16: one
// step at a rounding boundary). The fused inference form (gate_up bf16 -> bf16 or E4M3 per tensor / per
// row) at rows of 1 and 37 results (a value per thread), 1376, 5000, 14336 and 20000 (1, 2, 2 and 4
// vectors of 8 per thread; few rows: a cluster of 1024 threads per row) and 130 rows of 20000 (a block
// of 512 threads per row: 8 vectors each): within a bf16 step, the fp8 codes (compared dequantized)
// within an E4M3 step (absolute near 0: a subnormal step of a row amax of ~900).
#include "ops/activation_out.h"
#include "ops/cuda/op_table.h"
#include "ops/quantize.h"
#include "ops/swiglu.h"

#include <fmt/format.h>

namespace fp8kit::testing {
namespace {

struct Shape {
  int64_t rows, ffn;
};
constexpr Shape kShapes[] = {{1, 1}, {33, 37}, {64, 1376}};

const RegisterOps rows([](std::vector<OpCase>& t) {
  for (const Shape s : kShapes) {
    const std::string shape = fmt::format("{}x{}", s.rows, s.ffn);
    const int64_t n = s.rows * s.ffn;
    for (const bool bf16 : {false, true}) {
      t.push_back(
          {fmt::format("swiglu_forward/{}/{}", shape, bf16 ? "bf16" : "f32"),
           [=](ops::Context& c) {
             const Tensor gate = device_tensor(random_values(n, 31, -30.0f, 30.0f), {s.rows, s.ffn}, c.device());
             const Tensor up = device_tensor(random_values(n, 32, -2.0f, 2.0f), {s.rows, s.ffn}, c.device());
             std::vector<Tensor> out(1);
             ops::swiglu_forward(c, gate, up, bf16, out[0]);
             c.synchronize();
             return out;
           },
           1e-6, bf16 ? 1e-2 : 1e-5});
    }
    t.push_back({fmt::format("swiglu_backward/{}", shape),
                 [=](ops::Context& c) {
                   const Tensor gate = device_tensor(random_values(n, 31, -30.0f, 30.0f), {s.rows, s.ffn}, c.device());
                   const Tensor up = device_tensor(random_values(n, 32, -2.0f, 2.0f), {s.rows, s.ffn}, c.device());
                   const Tensor dout = device_tensor(random_values(n, 33), {s.rows, s.ffn}, c.device());
                   std::vector<Tensor> out(2);
                   ops::swiglu_backward(c, gate, up, dout, out[0], out[1]);
                   c.synchronize();
                   return out;
                 },
                 1e-6, 1e-5});
  }
});

constexpr Shape kFusedShapes[] = {{1, 1}, {33, 37}, {64, 1376}, {4, 5000}, {3, 14336}, {2, 20000}, {130, 20000}};

const RegisterOps fused_rows([](std::vector<OpCase>& t) {
  for (const Shape s : kFusedShapes) {
    for (const char* kind : {"bf16", "fp8_tensor", "fp8_row"}) {
      const bool fp8 = kind[0] == 'f';
      t.push_back({fmt::format("swiglu/{}x{}/{}", s.rows, s.ffn, kind),
                   [=](ops::Context& c) {
                     const Tensor gate_up = device_tensor(random_values(s.rows * 2 * s.ffn, 34, -30.0f, 30.0f),
                                                          {s.rows, 2 * s.ffn}, c.device(), DType::Bf16);
                     std::vector<Tensor> result;
                     run_activation_out(
                         c, kind, 20.0f, [&](const ops::ActivationOut& to) { ops::swiglu(c, gate_up, to); }, result);
                     return result;
                   },
                   fp8 ? 1e-2 : 1e-5, fp8 ? 0.13 : 1e-2});
    }
  }
});

}  // namespace
}  // namespace fp8kit::testing
