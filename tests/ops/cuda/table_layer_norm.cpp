// Op table rows: LayerNorm forward (f32 and bf16 output), and the backward's dx and parameter halves
// (one output gradient, or two summed as read), at awkward shapes: rows not a multiple of the 8 rows
// a GPU block takes, dim 1, 7 (fewer than a warp's lanes), 40, and the largest of the GPU's warp per row, 256;
// beyond it a block per row: 4096 (a Transformer's hidden size) and 1001 (rows not 16-byte aligned).
// The GPU sums a row as a warp or block tree, the CPU sequentially: the forward's outputs and dx agree to ~1e-6
// relative (bf16 outputs: within one bf16 step where a value sits at a rounding boundary). The
// backward rows start from the same statistics on both devices (the CPU core's, uploaded): dgamma and
// dbeta are then the CPU's bits (summed in its order, with its fused multiply-adds).
#include "ops/cpu/layer_norm.h"
#include "ops/cuda/op_table.h"
#include "ops/layer_norm.h"

#include <fmt/format.h>

namespace fp8kit::testing {
namespace {

struct Shape {
  int64_t rows, dim;
};
constexpr Shape kShapes[] = {{300, 64}, {1, 1}, {33, 7}, {700, 40}, {5, 256}, {37, 4096}, {9, 1001}};

// x [rows, dim], gamma and beta [dim] as host values (x with a per-row offset: non-zero means).
std::vector<float> x_values(Shape s) {
  std::vector<float> x = random_values(s.rows * s.dim, 11, -3.0f, 3.0f);
  for (int64_t r = 0; r < s.rows; ++r)
    for (int64_t i = 0; i < s.dim; ++i) x[r * s.dim + i] += static_cast<float>(r % 5) - 2.0f;
  return x;
}

const RegisterOps rows([](std::vector<OpCase>& t) {
  for (const Shape s : kShapes) {
    const std::string shape = fmt::format("{}x{}", s.rows, s.dim);
    for (const bool bf16 : {false, true}) {
      t.push_back({fmt::format("layer_norm_forward/{}/{}", shape, bf16 ? "bf16" : "f32"),
                   [=](ops::Context& c) {
                     const Tensor x = device_tensor(x_values(s), {s.rows, s.dim}, c.device());
                     const Tensor gamma = device_tensor(random_values(s.dim, 12, 0.5f, 1.5f), {s.dim}, c.device());
                     const Tensor beta = device_tensor(random_values(s.dim, 13), {s.dim}, c.device());
                     std::vector<Tensor> out(3);
                     ops::layer_norm_forward(c, x, gamma, beta, 1e-5f, bf16, out[0], out[1], out[2]);
                     return out;
                   },
                   1e-5, bf16 ? 1e-2 : 1e-5});
    }
    for (const bool two : {false, true}) {
      // The CPU core's statistics of x, uploaded: the same inputs for the backward on both devices.
      const auto inputs = [=](ops::Context& c) {
        const std::vector<float> x = x_values(s), gamma = random_values(s.dim, 12, 0.5f, 1.5f);
        std::vector<float> out(x.size()), mean(s.rows), rstd(s.rows);
        ops::cpu::layer_norm_forward(s.rows, s.dim, 1e-5f, x.data(), gamma.data(), gamma.data(), false, out.data(),
                                     mean.data(), rstd.data());
        std::vector<Tensor> in;
        in.push_back(device_tensor(x, {s.rows, s.dim}, c.device()));
        in.push_back(device_tensor(gamma, {s.dim}, c.device()));
        in.push_back(device_tensor(mean, {s.rows}, c.device()));
        in.push_back(device_tensor(rstd, {s.rows}, c.device()));
        in.push_back(device_tensor(random_values(s.rows * s.dim, 14), {s.rows, s.dim}, c.device()));
        in.push_back(device_tensor(random_values(s.rows * s.dim, 15), {s.rows, s.dim}, c.device()));
        return in;
      };
      const std::string grads = two ? "dout+dout2" : "dout";
      // dim 1: x - mean is 0, and dx is the rounding residue of gamma dout - mean(gamma dout) times
      // rstd = 1 / sqrt(eps): an absolute bound.
      t.push_back({fmt::format("layer_norm_backward_dx/{}/{}", shape, grads),
                   [=](ops::Context& c) {
                     const std::vector<Tensor> in = inputs(c);
                     std::vector<Tensor> out(1);
                     ops::layer_norm_backward_dx(c, in[0], in[1], in[2], in[3], in[4], two ? &in[5] : nullptr, out[0]);
                     return out;
                   },
                   s.dim == 1 ? 1e-3 : 1e-5, 1e-4});
      if (!two)  // dout2's values as the residual added in the dx pass
        t.push_back({fmt::format("layer_norm_backward_dx/{}/residual", shape),
                     [=](ops::Context& c) {
                       const std::vector<Tensor> in = inputs(c);
                       std::vector<Tensor> out(1);
                       ops::layer_norm_backward_dx(c, in[0], in[1], in[2], in[3], in[4], nullptr, out[0], &in[5]);
                       return out;
                     },
                     s.dim == 1 ? 1e-3 : 1e-5, 1e-4});
      t.push_back({fmt::format("layer_norm_backward_params/{}/{}", shape, grads), [=](ops::Context& c) {
                     const std::vector<Tensor> in = inputs(c);
                     std::vector<Tensor> out(2);
                     ops::layer_norm_backward_params(c, in[0], in[2], in[3], in[4], two ? &in[5] : nullptr, out[0],
                                                     out[1]);
                     return out;
                   }});
    }
  }
});

}  // namespace
}  // namespace fp8kit::testing
