// Op table rows: add (f32, and rounded to bf16), convert (f32 <-> bf16) and sum_dropout_backward
// (a + b, a + (b + c), a + ((b + c) + d), then the dropout's backward, active and inactive, with bf16's
// keep probability or float32's), at sizes that are not a multiple of the GPU's 256-thread blocks, and
// a single element. The same float32 additions in the same order and the CPU's masks: the same bits.
#include "ops/cuda/op_table.h"
#include "ops/elementwise.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <limits>

namespace fp8kit::testing {
namespace {

const std::vector<int64_t> kShapes[] = {{200, 33}, {1}, {3, 7, 5}};

// n values from `seed`, with exact cancellations and signed zeros mixed in.
std::vector<float> values(int64_t n, uint64_t seed) {
  std::vector<float> v = random_values(n, seed, -100.0f, 100.0f);
  for (int64_t i = 3; i < n; i += 17) v[i] = -0.0f;
  return v;
}

const RegisterOps rows([](std::vector<OpCase>& t) {
  for (const std::vector<int64_t>& shape : kShapes) {
    int64_t n = 1;
    for (const int64_t d : shape) n *= d;
    const std::string name = fmt::format("{}", fmt::join(shape, "x"));
    for (const bool bf16 : {false, true}) {
      t.push_back({fmt::format("add/{}/{}", name, bf16 ? "bf16" : "f32"), [=](ops::Context& c) {
                     const Tensor a = device_tensor(values(n, 41), shape, c.device());
                     const Tensor b = device_tensor(values(n, 42), shape, c.device());
                     std::vector<Tensor> out(1);
                     ops::add(c, a, b, bf16, out[0]);
                     return out;
                   }});
      for (const bool active : {false, true}) {
        for (const int more : {1, 2, 3}) {
          const ops::DropoutSpec spec{0, 0.1f, active};
          t.push_back({fmt::format("sum_dropout_backward/{}/{}/{}/{}_tensors", name, bf16 ? "bf16" : "f32",
                                   active ? "active" : "inactive", more + 1),
                       [=](ops::Context& c) {
                         const Tensor a = device_tensor(values(n, 43), shape, c.device());
                         const Tensor b = device_tensor(values(n, 44), shape, c.device());
                         const Tensor d1 = device_tensor(values(n, 45), shape, c.device());
                         const Tensor d2 = device_tensor(values(n, 46), shape, c.device());
                         std::vector<Tensor> out(1);
                         const Tensor* branches[] = {&b, &d1, &d2};
                         ops::sum_dropout_backward(c, a, std::span<const Tensor* const>(branches, more), bf16, spec,
                                                   out[0]);
                         return out;
                       }});
        }
      }
    }
  }
  for (const DType to : {DType::Bf16, DType::F32}) {  // f32 -> bf16 (rounding, NaN), bf16 -> f32
    t.push_back({fmt::format("convert/to_{}", name(to)), [=](ops::Context& c) {
                   std::vector<float> v = random_values(1000, 49, -100.0f, 100.0f);
                   v[7] = std::numeric_limits<float>::quiet_NaN();
                   v[8] = -0.0f;
                   v[9] = 1.00390625f;  // halfway between two bf16 values: to the even one
                   const DType from = to == DType::F32 ? DType::Bf16 : DType::F32;
                   const Tensor x = device_tensor(v, {10, 100}, c.device(), from);
                   std::vector<Tensor> out(1);
                   ops::convert(c, x, to, out[0]);
                   return out;
                 }});
  }
  t.push_back({"sum_dropout_backward/in_place", [](ops::Context& c) {
                 std::vector<Tensor> out;
                 out.push_back(device_tensor(values(300, 47), {300}, c.device()));
                 const Tensor b = device_tensor(values(300, 48), {300}, c.device());
                 const Tensor* branches[] = {&b, &b};
                 ops::sum_dropout_backward(c, out[0], branches, false, {1, 0.5f, true}, out[0]);
                 return out;
               }});
});

}  // namespace
}  // namespace fp8kit::testing
