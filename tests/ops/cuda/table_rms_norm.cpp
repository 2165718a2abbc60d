// Op table rows: RMSNorm forward (f32 and bf16 output) and backward at awkward shapes: one row, dim 1
// and 7 (fewer than a warp's lanes), 33 and 4097 (rows the GPU reads a float at a time), 64, 4096 and
// 16384 (4 floats at a time), and rows not a multiple of the 256-row pieces of dweight's sum.
// The GPU sums a row as a block tree, the CPU sequentially: out, rstd and dx agree to ~1e-6 relative
// (bf16 outputs: within one bf16 step where a value sits at a rounding boundary). The backward rows
// start from the CPU core's rstd on both devices: dweight is then the CPU's bits (its order, its fma).
// add_rms_norm (bf16 residual + delta, the norm, out as bf16 or E4M3 per tensor / per row) at rows of 1
// and 7 columns (a value per thread), 4097 (unaligned), 4096, 5000, 14336 and 20000 (1, 2, 4 and 8
// vectors of 8 per thread; few rows: a cluster of blocks per row) and 130 rows of 4096 (a block per
// row): the residual bit for bit; out within a bf16 step, its fp8 codes (compared dequantized) within
// an E4M3 step (absolute near 0: a subnormal step) where that bf16 step moved a value or the row's amax.
#include "ops/activation_out.h"
#include "ops/cpu/rms_norm.h"
#include "ops/cuda/op_table.h"
#include "ops/quantize.h"
#include "ops/rms_norm.h"

#include <fmt/format.h>

namespace fp8kit::testing {
namespace {

struct Shape {
  int64_t rows, dim;
};
constexpr Shape kShapes[] = {{300, 64}, {1, 1}, {33, 7}, {700, 33}, {5, 4096}, {3, 16384}, {7, 4097}, {1, 16384}};

std::vector<float> x_values(Shape s) { return random_values(s.rows * s.dim, 11, -3.0f, 3.0f); }
std::vector<float> weight_values(Shape s) { return random_values(s.dim, 12, 0.5f, 1.5f); }

const RegisterOps rows([](std::vector<OpCase>& t) {
  for (const Shape s : kShapes) {
    const std::string shape = fmt::format("{}x{}", s.rows, s.dim);
    for (const bool bf16 : {false, true}) {
      t.push_back({fmt::format("rms_norm_forward/{}/{}", shape, bf16 ? "bf16" : "f32"),
                   [=](ops::Context& c) {
                     const Tensor x = device_tensor(x_values(s), {s.rows, s.dim}, c.device());
                     const Tensor weight = device_tensor(weight_values(s), {s.dim}, c.device());
                     std::vector<Tensor> out(2);
                     ops::rms_norm_forward(c, x, weight, 1e-6f, bf16, out[0], out[1]);
                     c.synchronize();
                     return out;
                   },
                   1e-5, bf16 ? 1e-2 : 1e-5});
    }
    // The backward from the CPU core's rstd of x: the same inputs on both devices. Output 0: dx
    // (a block tree on the GPU), output 1: dweight (the CPU's order), output 2: dx + a residual's
    // gradient (added in the dx pass on the GPU).
    for (const int output : {0, 1, 2}) {
      static constexpr const char* kOutputs[] = {"dx", "dweight", "dx_plus_residual"};
      t.push_back({fmt::format("rms_norm_backward/{}/{}", shape, kOutputs[output]),
                   [=](ops::Context& c) {
                     const std::vector<float> x = x_values(s), weight = weight_values(s);
                     std::vector<float> out(x.size()), rstd(s.rows);
                     ops::cpu::rms_norm_forward(s.rows, s.dim, 1e-6f, x.data(), weight.data(), false, out.data(),
                                                rstd.data());
                     const Tensor xt = device_tensor(x, {s.rows, s.dim}, c.device());
                     const Tensor wt = device_tensor(weight, {s.dim}, c.device());
                     const Tensor rt = device_tensor(rstd, {s.rows}, c.device());
                     const Tensor dout = device_tensor(random_values(s.rows * s.dim, 14), {s.rows, s.dim}, c.device());
                     const Tensor residual =
                         device_tensor(random_values(s.rows * s.dim, 15), {s.rows, s.dim}, c.device());
                     std::vector<Tensor> grads(2);
                     ops::rms_norm_backward(c, xt, wt, rt, dout, grads[0], grads[1], output == 2 ? &residual : nullptr);
                     c.synchronize();
                     std::vector<Tensor> result;
                     result.push_back(std::move(grads[output == 1 ? 1 : 0]));
                     return result;
                   },
                   output == 1 ? 0.0 : 1e-5, output == 1 ? 0.0 : 1e-4});
    }
  }
});

constexpr Shape kAddShapes[] = {{1, 1}, {33, 7}, {7, 4097}, {5, 4096}, {3, 5000}, {2, 14336}, {2, 20000}, {130, 4096}};

const RegisterOps add_rows([](std::vector<OpCase>& t) {
  for (const Shape s : kAddShapes) {
    for (const bool delta : {true, false}) {
      for (const char* kind : {"bf16", "fp8_tensor", "fp8_row"}) {
        const bool fp8 = kind[0] == 'f';
        t.push_back({fmt::format("add_rms_norm/{}x{}/{}/{}", s.rows, s.dim, delta ? "delta" : "no_delta", kind),
                     [=](ops::Context& c) {
                       Tensor residual = device_tensor(x_values(s), {s.rows, s.dim}, c.device(), DType::Bf16);
                       const Tensor d = device_tensor(random_values(s.rows * s.dim, 13), {s.rows, s.dim}, c.device(),
                                                      DType::Bf16);
                       const Tensor weight = device_tensor(weight_values(s), {s.dim}, c.device());
                       std::vector<Tensor> result;
                       run_activation_out(
                           c, kind, 60.0f,
                           [&](const ops::ActivationOut& to) {
                             ops::add_rms_norm(c, residual, delta ? &d : nullptr, weight, 1e-6f, to);
                           },
                           result);
                       result.insert(result.begin(), std::move(residual));
                       return result;
                     },
                     fp8 ? 1e-4 : 1e-5, fp8 ? 0.13 : 1e-2});
      }
    }
  }
});

}  // namespace
}  // namespace fp8kit::testing
