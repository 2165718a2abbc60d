// Op table rows: mean pooling with the following dropout fused, forward and backward, f32 and bf16
// (the mean rounded; the keep probability as in bf16), dropout active and inactive, at the seed
// model's shape (seq 200), an awkward one (dim 33: two column blocks, one nearly empty) and 1 x 1 x 1.
// The GPU sums each column in sequence order and draws the CPU's masks: the same bits.
#include "ops/cuda/op_table.h"
#include "ops/mean_pool.h"

#include <fmt/format.h>

namespace fp8kit::testing {
namespace {

struct Shape {
  int64_t batch, seq, dim;
};
constexpr Shape kShapes[] = {{4, 200, 32}, {3, 7, 33}, {1, 1, 1}};

const RegisterOps rows([](std::vector<OpCase>& t) {
  for (const Shape s : kShapes) {
    const std::string shape = fmt::format("{}x{}x{}", s.batch, s.seq, s.dim);
    for (const bool bf16 : {false, true}) {
      for (const bool active : {false, true}) {
        const ops::DropoutSpec spec{4, 0.25f, active};
        const std::string config = fmt::format("{}/{}/{}", shape, bf16 ? "bf16" : "f32", active ? "dropout" : "eval");
        t.push_back({"mean_pool_forward/" + config, [=](ops::Context& c) {
                       const Tensor x =
                           device_tensor(random_values(s.batch * s.seq * s.dim, 21, -4.0f, 4.0f),
                                         {s.batch, s.seq, s.dim}, c.device());
                       std::vector<Tensor> out(1);
                       ops::mean_pool_forward(c, x, bf16, spec, out[0]);
                       return out;
                     }});
        t.push_back({"mean_pool_backward/" + config, [=](ops::Context& c) {
                       const Tensor dout = device_tensor(random_values(s.batch * s.dim, 22), {s.batch, s.dim},
                                                         c.device());
                       std::vector<Tensor> out(1);
                       ops::mean_pool_backward(c, dout, s.seq, bf16, spec, out[0]);
                       return out;
                     }});
      }
    }
  }
});

}  // namespace
}  // namespace fp8kit::testing
