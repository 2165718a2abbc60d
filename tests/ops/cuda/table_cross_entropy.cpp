// Op table rows: softmax cross-entropy, losses and gradients (grad_scale 1 / counted rows), forward
// only and in place, at GPT-2's vocabulary (50257: read a float at a time), a one-column vocabulary,
// Llama's 32000 and 128256 and a 256K one (4 floats at a time), with ignored rows (negative targets)
// and the vocabulary's first and last ids. The GPU adds a row's exponentials in float as a block tree,
// the CPU in double: losses and gradients agree to ~1e-6 relative (2e-5 allowed).
#include "ops/cross_entropy.h"
#include "ops/cuda/op_table.h"

#include <fmt/format.h>

namespace fp8kit::testing {
namespace {

struct Shape {
  int64_t rows, vocab;
};
constexpr Shape kShapes[] = {{5, 50257}, {3, 1}, {64, 1000}, {4, 32000}, {3, 128256}, {2, 262144}};

// Every third row ignored, then the last id, id 0, and ids spread over the vocabulary.
std::vector<int32_t> targets(Shape s) {
  std::vector<int32_t> t(s.rows);
  for (int64_t r = 0; r < s.rows; ++r) t[r] = static_cast<int32_t>(r * 7919 % s.vocab);
  t[0] = static_cast<int32_t>(s.vocab - 1);
  for (int64_t r = 2; r < s.rows; r += 3) t[r] = r % 2 == 0 ? -1 : -100;
  return t;
}

const RegisterOps rows([](std::vector<OpCase>& t) {
  for (const Shape s : kShapes) {
    const std::string shape = fmt::format("{}x{}", s.rows, s.vocab);
    for (const char* mode : {"forward_backward", "forward", "in_place"}) {
      t.push_back({fmt::format("cross_entropy/{}/{}", shape, mode),
                   [=](ops::Context& c) {
                     const std::string m = mode;
                     Tensor logits = device_tensor(random_values(s.rows * s.vocab, 41, -10.0f, 10.0f),
                                                   {s.rows, s.vocab}, c.device());
                     const Tensor ids = device_ints(targets(s), {s.rows}, c.device());
                     std::vector<Tensor> out(1);
                     const float scale = 1.0f / static_cast<float>(s.rows);
                     if (m == "forward") {
                       ops::cross_entropy(c, logits, ids, scale, out[0], nullptr);
                     } else if (m == "in_place") {
                       ops::cross_entropy(c, logits, ids, scale, out[0], &logits);
                       out.push_back(std::move(logits));
                     } else {
                       out.emplace_back();
                       ops::cross_entropy(c, logits, ids, scale, out[0], &out[1]);
                     }
                     c.synchronize();
                     return out;
                   },
                   1e-8, 2e-5});
    }
  }
});

}  // namespace
}  // namespace fp8kit::testing
