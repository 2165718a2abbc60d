// Op table rows: dropout forward (f32, and bf16: the quotient rounded and the keep probability bf16's)
// and backward, active and inactive (a copy), in place, at sizes that are not a multiple of the GPU's
// 256-thread blocks, and a single element. The GPU draws the CPU's masks: the same bits.
#include "ops/cuda/op_table.h"
#include "ops/dropout.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace fp8kit::testing {
namespace {

const std::vector<int64_t> kShapes[] = {{1000}, {3, 7, 5}, {1}, {67, 129}};

const RegisterOps rows([](std::vector<OpCase>& t) {
  for (const std::vector<int64_t>& shape : kShapes) {
    int64_t n = 1;
    for (const int64_t d : shape) n *= d;
    for (const bool bf16 : {false, true}) {
      for (const bool active : {false, true}) {
        const ops::DropoutSpec spec{5, 0.1f, active};
        const std::string config =
            fmt::format("{}/{}/{}", fmt::join(shape, "x"), bf16 ? "bf16" : "f32", active ? "active" : "inactive");
        t.push_back({"dropout_forward/" + config, [=](ops::Context& c) {
                       const Tensor x = device_tensor(random_values(n, 31, -8.0f, 8.0f), shape, c.device());
                       std::vector<Tensor> out(1);
                       ops::dropout_forward(c, x, bf16, spec, out[0]);
                       return out;
                     }});
        t.push_back({"dropout_backward/" + config, [=](ops::Context& c) {
                       const Tensor dy = device_tensor(random_values(n, 32), shape, c.device());
                       std::vector<Tensor> out(1);
                       ops::dropout_backward(c, dy, bf16, spec, out[0]);
                       return out;
                     }});
      }
    }
  }
  t.push_back({"dropout_forward/in_place/bf16", [](ops::Context& c) {
                 std::vector<Tensor> out;
                 out.push_back(device_tensor(random_values(515, 33, -8.0f, 8.0f), {515}, c.device()));
                 ops::dropout_forward(c, out[0], true, {6, 0.5f, true}, out[0]);
                 return out;
               }});
});

}  // namespace
}  // namespace fp8kit::testing
