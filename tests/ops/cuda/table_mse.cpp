// Op table rows: the MSE loss at one element, an odd shape and the lab's [1024, 768] (several pieces):
// dy bit for bit, the loss within fp32 summation order (4096 terms in order per piece on the CPU, a
// tree on the GPU: ~1e-5 relative).
#include "ops/cuda/op_table.h"
#include "ops/mse.h"

#include <fmt/format.h>

namespace fp8kit::testing {
namespace {

struct Shape {
  int64_t rows, cols;
};
constexpr Shape kShapes[] = {{1, 1}, {33, 37}, {1024, 768}};

// The op's outputs {loss, dy} for shape s on c's device.
std::vector<Tensor> run(ops::Context& c, Shape s) {
  const Tensor y = device_tensor(random_values(s.rows * s.cols, 51, -3, 3), {s.rows, s.cols}, c.device());
  const Tensor target = device_tensor(random_values(s.rows * s.cols, 52), {s.rows, s.cols}, c.device());
  std::vector<Tensor> out(2);
  ops::mse_loss(c, y, target, out[0], out[1]);
  c.synchronize();
  return out;
}

std::vector<Tensor> one(std::vector<Tensor> all, size_t k) {
  std::vector<Tensor> out;
  out.push_back(std::move(all[k]));
  return out;
}

const RegisterOps rows([](std::vector<OpCase>& t) {
  for (const Shape s : kShapes) {
    const std::string shape = fmt::format("{}x{}", s.rows, s.cols);
    t.push_back({"mse_loss/" + shape + "/loss", [=](ops::Context& c) { return one(run(c, s), 0); }, 0,
                 1e-4});
    t.push_back({"mse_loss/" + shape + "/dy", [=](ops::Context& c) { return one(run(c, s), 1); }});
  }
});

}  // namespace
}  // namespace fp8kit::testing
