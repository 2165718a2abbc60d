// Op table rows: causal attention, forward (out) and backward (dq, dk, dv) with head dims 16, 32 and
// 64, f32 and bf16 rounding, dropout on the probabilities active and inactive, and awkward shapes (T not
// a multiple of 32, batch 1, T = 1, the seed's shape, a long sequence). `saved` differs by device (the
// probabilities on the CPU, row statistics on the GPU), so rows compare what the op computes from it.
// Tolerances: the CPU's exp is a polynomial and its dot products run in 8 lanes, the GPU's are expf and
// sequential, so f32 agrees to ~1e-6 relative; in bf16 a score or probability on the other side of a
// rounding boundary moves by a bf16 ulp (2^-8 relative: inputs in [-1, 1) keep scores below ~2), and
// an output rounding may flip with it.
#include "ops/attention.h"
#include "ops/cuda/op_table.h"

#include <fmt/format.h>

namespace fp8kit::testing {
namespace {

struct Shape {
  const char* name;
  ops::AttentionShape shape;
};

// The forward (`backward` false: out) or the backward after it (dq, dk, dv) of inputs from fixed seeds.
std::vector<Tensor> run(ops::Context& c, const ops::AttentionShape& s, bool bf16, bool dropout, bool backward) {
  const int64_t n = s.batch * s.seq * s.heads * s.head_dim;
  const std::vector<int64_t> rows = {s.batch, s.seq, s.heads * s.head_dim};
  const Tensor q = device_tensor(random_values(n, 1), rows, c.device());
  const Tensor k = device_tensor(random_values(n, 2), rows, c.device());
  const Tensor v = device_tensor(random_values(n, 3), rows, c.device());
  const ops::DropoutSpec spec{1, 0.1f, dropout};
  Tensor saved;
  std::vector<Tensor> out(1);
  ops::causal_attention_forward(c, q, k, v, s, spec, bf16, saved, out[0]);
  c.synchronize();  // before the inputs are freed
  if (!backward) return out;
  const Tensor dout = device_tensor(random_values(n, 4), rows, c.device());
  std::vector<Tensor> grads(3);
  ops::causal_attention_backward(c, q, k, v, saved, spec, bf16, dout, grads[0], grads[1], grads[2]);
  c.synchronize();
  return grads;
}

void add(std::vector<OpCase>& t, const Shape& shape, bool bf16, bool dropout) {
  const std::string config = fmt::format("{}/{}{}", shape.name, bf16 ? "bf16" : "f32", dropout ? "/dropout" : "");
  const ops::AttentionShape s = shape.shape;
  t.push_back({"attention_forward/" + config, [=](ops::Context& c) { return run(c, s, bf16, dropout, false); },
               bf16 ? 2e-2 : 1e-5, bf16 ? 2e-2 : 1e-4});
  t.push_back({"attention_backward/" + config, [=](ops::Context& c) { return run(c, s, bf16, dropout, true); },
               bf16 ? 3e-2 : 1e-4, bf16 ? 3e-2 : 1e-3});
}

const RegisterOps rows([](std::vector<OpCase>& t) {
  const Shape per_dim[] = {
      {"b2_t37_h3_d16", {2, 37, 3, 16}}, {"b1_t70_h2_d32", {1, 70, 2, 32}}, {"b3_t33_h1_d64", {3, 33, 1, 64}}};
  for (const Shape& s : per_dim)
    for (const bool bf16 : {false, true})
      for (const bool dropout : {false, true}) add(t, s, bf16, dropout);
  add(t, {"t1", {2, 1, 1, 16}}, false, true);
  add(t, {"seed", {32, 200, 2, 16}}, true, true);
  add(t, {"b1_t250_h2_d64", {1, 250, 2, 64}}, false, true);
});

}  // namespace
}  // namespace fp8kit::testing
