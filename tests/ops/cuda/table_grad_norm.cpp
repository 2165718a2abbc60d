// Op table rows: clip_by_global_norm over one element, less than a piece, several pieces with a short
// last one, and a 10M-parameter buffer; without clipping (max_norm 0, or above the norm: the same bits)
// and clipping. The norm's squares are added in double on both devices, in other orders: the norm and
// the clipped gradients agree to ~1e-7 relative (the same bits but at a rounding tie).
#include "ops/cpu/grad_norm.h"
#include "ops/cuda/op_table.h"
#include "ops/grad_norm.h"

#include <fmt/format.h>

namespace fp8kit::testing {
namespace {

const RegisterOps rows([](std::vector<OpCase>& t) {
  for (const int64_t n : {int64_t{1}, int64_t{1000}, 5 * ops::cpu::kGradNormPiece + 3, int64_t{10000000}}) {
    for (const float max_norm : {0.0f, 1e9f, 0.5f}) {
      t.push_back({fmt::format("clip_by_global_norm/n{}/max_norm{}", n, max_norm),
                   [=](ops::Context& c) {
                     std::vector<Tensor> out(2);
                     out[0] = device_tensor(random_values(n, 51, -0.01f, 0.01f), {n}, c.device());
                     ops::clip_by_global_norm(c, out[0], max_norm, out[1]);
                     c.synchronize();
                     return out;
                   },
                   0.0, 2.5e-7});
    }
  }
});

}  // namespace
}  // namespace fp8kit::testing
