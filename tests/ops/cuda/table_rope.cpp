// Op table rows: RoPE, bit for bit (the same table, uploaded from the host; every product and sum
// rounded explicitly on both devices): the forward in f32 and bf16, in place, and the backward, each
// also with bf16 tensors in or out, at a start offset, with head_dim 2 and 6 (pairs not a multiple of
// a warp), one token, and Llama's 64 and 128 with many heads.
#include "ops/cuda/op_table.h"
#include "ops/rope.h"

#include <fmt/format.h>

namespace fp8kit::testing {
namespace {

struct Shape {
  int64_t batch, seq, heads, head_dim, start;
};
constexpr Shape kShapes[] = {{2, 37, 3, 6, 5}, {1, 1, 1, 2, 0}, {4, 128, 8, 64, 0}, {2, 33, 4, 128, 100}};

const RegisterOps rows([](std::vector<OpCase>& t) {
  for (const Shape s : kShapes) {
    const std::string shape = fmt::format("b{}_t{}_h{}_d{}_start{}", s.batch, s.seq, s.heads, s.head_dim, s.start);
    const int64_t n = s.batch * s.seq * s.heads * s.head_dim;
    const std::vector<int64_t> dims{s.batch, s.seq, s.heads * s.head_dim};
    // Modes: the op, then (bf16_*) bf16 tensors in or out: x f32 -> out bf16, x bf16 -> out f32 and
    // bf16 (in place), dout bf16 -> dx f32.
    for (const char* mode : {"f32", "bf16", "in_place", "backward", "bf16_out", "bf16_in", "bf16_in_place",
                             "bf16_backward"}) {
      t.push_back({fmt::format("rope/{}/{}", shape, mode), [=](ops::Context& c) {
                     const std::string m = mode;
                     const DType in = m == "bf16_in" || m == "bf16_in_place" || m == "bf16_backward" ? DType::Bf16
                                                                                                   : DType::F32;
                     std::vector<Tensor> out(2);
                     ops::rope_table(c, s.start + s.seq + 3, s.head_dim, 10000.0, out[0]);
                     Tensor x = device_tensor(random_values(n, 21, -4.0f, 4.0f), dims, c.device(), in);
                     if (m == "backward" || m == "bf16_backward") {
                       ops::rope_backward(c, out[0], x, s.heads, s.start, out[1]);
                     } else if (m == "in_place" || m == "bf16_in_place") {
                       ops::rope_forward(c, out[0], x, s.heads, s.start, false, x, in);
                       out[1] = std::move(x);
                     } else {
                       ops::rope_forward(c, out[0], x, s.heads, s.start, m == "bf16", out[1],
                                         m == "bf16_out" ? DType::Bf16 : DType::F32);
                     }
                     c.synchronize();
                     return out;
                   }});
    }
  }
});

}  // namespace
}  // namespace fp8kit::testing
