// Op table rows: three Adam steps over flat tensors (one element, a few AVX2 widths, and many chunks
// with an odd tail), the second with tiny gradients, at the default and other hyper-parameters, and
// with AdamW's weight decay (on the first third of the elements) and a warmup + cosine schedule (the
// GPU evaluates it from its count); the
// outputs are w, m, v and the iteration count. The GPU rounds every operation, the CPU's scalar tail
// may fuse a multiply-add (GCC's -ffp-contract=fast), and powf of the bias correction may differ by an
// ulp: the moments agree to their last bits, an update to ~1e-7 relative (tests/ops/cuda/adam_test.cpp).
#include "ops/adam.h"
#include "ops/cuda/op_table.h"

#include <fmt/format.h>

namespace fp8kit::testing {
namespace {

const RegisterOps rows([](std::vector<OpCase>& t) {
  struct Options {
    const char* name;
    ops::AdamOptions options;
  };
  ops::AdamOptions adamw{3e-3f, 0.85f, 0.995f, 1e-6f};
  adamw.weight_decay = 0.1f;
  adamw.warmup_steps = 1;  // step 1 in the warmup, steps 2 and 3 on the cosine
  adamw.decay_steps = 3;
  const Options all[] = {
      {"default", {}}, {"lr3e-3_b0.85_0.995", {3e-3f, 0.85f, 0.995f, 1e-6f}}, {"adamw_warmup_cosine", adamw}};
  for (const Options& o : all) {
    for (const int64_t n : {1, 1000, 653953}) {
      const ops::AdamOptions options = o.options;
      t.push_back({fmt::format("adam_step/{}/n{}", o.name, n),
                   [=](ops::Context& c) {
                     std::vector<Tensor> out;
                     out.push_back(device_tensor(random_values(n, 1), {n}, c.device()));  // w
                     out.emplace_back(std::vector<int64_t>{n}, DType::F32, c.device());   // m
                     out.emplace_back(std::vector<int64_t>{n}, DType::F32, c.device());   // v
                     out.emplace_back(std::vector<int64_t>{1}, DType::F32, c.device());   // iterations
                     std::vector<Tensor> grads;  // alive until the queued steps have run
                     for (int step = 0; step < 3; ++step) {
                       const float scale = step == 1 ? 1e-6f : 1.0f;
                       grads.push_back(device_tensor(random_values(n, 10 + step, -scale, scale), {n}, c.device()));
                       ops::adam_step(c, options, out[3], out[0], grads.back(), out[1], out[2], false, n / 3);
                     }
                     c.synchronize();
                     return out;
                   },
                   1e-7, 1e-5});
    }
  }
});

}  // namespace
}  // namespace fp8kit::testing
