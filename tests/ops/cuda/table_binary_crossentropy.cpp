// Op table rows: sigmoid + binary cross-entropy (probs, the loss on the device, dz), z [batch] and
// [batch, 1], f32 and bf16 probabilities, batch 1, 37 and the GPU's largest, 1024, logits saturated on
// both sides of the clip; and evaluation (no labels: probs only). CUDA's expf and logf are within 2 ulp
// of glibc's and the loss is a warp-tree sum: f32 outputs within 1e-5 relative; bf16 probabilities
// agree but where a value sits at a rounding boundary (a bf16 step, 2^-8 relative, and dz with it).
#include "ops/binary_crossentropy.h"
#include "ops/cuda/op_table.h"

#include <fmt/format.h>

namespace fp8kit::testing {
namespace {

std::vector<float> logits(int64_t batch) {
  std::vector<float> z = random_values(batch, 51, -6.0f, 6.0f);
  if (batch > 2) z[0] = 40.0f, z[1] = -40.0f;  // clipped on both sides
  return z;
}

const RegisterOps rows([](std::vector<OpCase>& t) {
  for (const int64_t batch : {1, 37, 1024}) {
    for (const bool column : {false, true}) {
      for (const bool bf16 : {false, true}) {
        const std::vector<int64_t> shape = column ? std::vector<int64_t>{batch, 1} : std::vector<int64_t>{batch};
        const std::string config = fmt::format("{}{}/{}", batch, column ? "x1" : "", bf16 ? "bf16" : "f32");
        t.push_back({"sigmoid_binary_crossentropy/" + config,
                     [=](ops::Context& c) {
                       const Tensor z = device_tensor(logits(batch), shape, c.device());
                       std::vector<float> y(batch);
                       for (int64_t i = 0; i < batch; ++i) y[i] = static_cast<float>((i * 7) % 3 == 0);
                       const Tensor labels = device_tensor(y, {batch}, c.device());
                       std::vector<Tensor> out(3);
                       ops::sigmoid_binary_crossentropy(c, z, &labels, bf16, out[0], out[1], out[2]);
                       return out;
                     },
                     1e-6, bf16 ? 2e-2 : 1e-5});
      }
    }
  }
  t.push_back({"sigmoid_binary_crossentropy/eval", [](ops::Context& c) {
                 const Tensor z = device_tensor(logits(37), {37, 1}, c.device());
                 Tensor loss, dz;
                 std::vector<Tensor> out(1);
                 ops::sigmoid_binary_crossentropy(c, z, nullptr, false, out[0], loss, dz);
                 return out;
               },
               1e-6, 1e-5});
});

}  // namespace
}  // namespace fp8kit::testing
