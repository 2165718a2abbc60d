// Op table rows: SwiGLU forward (f32, bf16) and backward, at one element, an odd shape and an MLP's
// width, with gates up to +-30 (exp overflowing nowhere, silu near 0 and near g). The same float32
// operations in the same order; expf differs from glibc's by up to ~2 ulp: ~1e-6 relative (bf16: one
// step at a rounding boundary).
#include "ops/cuda/op_table.h"
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

}  // namespace
}  // namespace fp8kit::testing
