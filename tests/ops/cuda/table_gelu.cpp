// Op table rows: GELU inference (bf16 -> bf16 or E4M3 per tensor / per row) at rows of 1 and 37 values,
// the lab's hidden width 3072 at few rows (a cluster per row) and at 300 rows (a block per row). The
// same float operations on both devices (ops/activation.h) but each device's tanhf (~1 ulp apart):
// within a bf16 step where one rounds differently; fp8 codes (compared dequantized) within an E4M3 step.
#include "ops/activation_out.h"
#include "ops/cuda/op_table.h"
#include "ops/gelu.h"
#include "ops/quantize.h"

#include <fmt/format.h>

namespace fp8kit::testing {
namespace {

struct Shape {
  int64_t rows, cols;
};
constexpr Shape kShapes[] = {{1, 1}, {33, 37}, {8, 3072}, {300, 3072}};

const RegisterOps rows([](std::vector<OpCase>& t) {
  for (const Shape s : kShapes) {
    for (const char* kind : {"bf16", "fp8_tensor", "fp8_row"}) {
      const bool fp8 = kind[0] == 'f';
      t.push_back({fmt::format("gelu/{}x{}/{}", s.rows, s.cols, kind),
                   [=](ops::Context& c) {
                     const Tensor x = device_tensor(random_values(s.rows * s.cols, 61, -8.0f, 8.0f), {s.rows, s.cols},
                                                    c.device(), DType::Bf16);
                     std::vector<Tensor> result;
                     run_activation_out(c, kind, 40.0f, [&](const ops::ActivationOut& to) { ops::gelu(c, x, to); },
                                        result);
                     return result;
                   },
                   fp8 ? 1e-2 : 1e-5, fp8 ? 0.13 : 1e-2});
    }
  }
});

}  // namespace
}  // namespace fp8kit::testing
