// Op table rows: grouped-query SDPA, forward (out, lse) and backward (dq, dk, dv), bf16 and f32
// tensors, head dims 64 and 128, GQA ratios 1, 2 and 4, causal or not, awkward shapes (one query, a
// partial tile) and a long one (seq 2048, head_dim 128, GQA 4). Inputs are bf16 values on both devices,
// so both read the same numbers; the CPU rounds out to bf16 as the GPU does (f32 rows: bf16_out).
// Tolerances: cuDNN rounds the probabilities (and dS in the backward) to bf16 before the second GEMM
// and sums in another order, so outputs agree to about a bf16 ulp (2^-8 relative) of their terms;
// the gradients' rows sum many such terms (on the H100, seq 130: one dv element of 150 off by 0.011
// from a sum that cancels to -0.058, so the backward's absolute bound is 2e-2).
// The FP8 forward (fp8 rows): the same codes and scales on both devices, but cuDNN's tiles of keys
// differ from the CPU's 64, so probabilities quantized against another running maximum round
// differently (each up to 2^-4 of its term: out within 2e-2 of |v| <= 1), and an out value near an
// E4M3 boundary may land one step (2^-3 relative) away.
#include "numerics/cast.h"
#include "ops/cuda/op_table.h"
#include "ops/sdpa.h"

#include <fmt/format.h>

namespace fp8kit::testing {
namespace {

struct Shape {
  const char* name;
  ops::SdpaShape shape;
};

// Random bf16 values in [-range, range) as a `dtype` tensor of `shape` on `device`.
Tensor input(const std::vector<int64_t>& shape, uint64_t seed, float range, DType dtype, Device device) {
  std::vector<float> values = random_values(shape[0] * shape[1] * shape[2], seed, -range, range);
  for (float& x : values) x = round_bf16(x);
  return device_tensor(values, shape, device, dtype);
}

// The forward (out, lse) or the backward after it (dq, dk, dv) of inputs from fixed seeds.
std::vector<Tensor> run(ops::Context& c, const ops::SdpaShape& s, DType dtype, bool backward) {
  const std::vector<int64_t> q_shape = {s.batch, s.seq, s.heads * s.head_dim},
                             kv_shape = {s.batch, s.seq, s.kv_heads * s.head_dim};
  const Tensor q = input(q_shape, 1, 2.0f, dtype, c.device()), k = input(kv_shape, 2, 2.0f, dtype, c.device()),
               v = input(kv_shape, 3, 1.0f, dtype, c.device());
  std::vector<Tensor> out(2);
  ops::sdpa_forward(c, s, q, k, v, true, out[0], out[1]);
  c.synchronize();  // before the inputs are freed
  if (!backward) return out;
  const Tensor dout = input(q_shape, 4, 1.0f, dtype, c.device());
  std::vector<Tensor> grads(3);
  ops::sdpa_backward(c, s, q, k, v, out[0], out[1], dout, grads[0], grads[1], grads[2]);
  c.synchronize();
  return grads;
}

void add_fp8(std::vector<OpCase>& t, const Shape& shape, DType dtype) {
  ops::SdpaShape s = shape.shape;
  s.fp8 = true;
  const auto forward = [=](ops::Context& c) { return run(c, s, dtype, false); };
  t.push_back({fmt::format("sdpa_forward/fp8/{}/{}", shape.name, name(dtype)), forward, 2e-2, 0.13});
}

void add(std::vector<OpCase>& t, const Shape& shape, DType dtype) {
  const std::string config = fmt::format("{}/{}", shape.name, name(dtype));
  const ops::SdpaShape s = shape.shape;
  t.push_back({"sdpa_forward/" + config, [=](ops::Context& c) { return run(c, s, dtype, false); }, 2e-3, 1e-2});
  t.push_back({"sdpa_backward/" + config, [=](ops::Context& c) { return run(c, s, dtype, true); }, 2e-2, 2e-2});
}

const RegisterOps rows([](std::vector<OpCase>& t) {
  const Shape shapes[] = {
      {"b2_t1_h4_kv2_d64", {.batch = 2, .seq = 1, .heads = 4, .kv_heads = 2, .head_dim = 64}},
      {"b1_t7_h4_kv1_d128", {.batch = 1, .seq = 7, .heads = 4, .kv_heads = 1, .head_dim = 128}},
      {"b2_t130_h4_kv2_d64", {.batch = 2, .seq = 130, .heads = 4, .kv_heads = 2, .head_dim = 64}},
      {"b1_t130_h2_kv2_d128_full",
       {.batch = 1, .seq = 130, .heads = 2, .kv_heads = 2, .head_dim = 128, .causal = false}},
      {"b2_t256_h8_kv4_d64_scale", {.batch = 2, .seq = 256, .heads = 8, .kv_heads = 4, .head_dim = 64, .scale = 0.1f}},
  };
  for (const Shape& s : shapes)
    for (const DType dtype : {DType::Bf16, DType::F32}) add(t, s, dtype);
  const Shape long_gqa{"b1_t2048_h8_kv2_d128", {.batch = 1, .seq = 2048, .heads = 8, .kv_heads = 2, .head_dim = 128}};
  add(t, long_gqa, DType::Bf16);
  for (const Shape& s : {shapes[1], shapes[2], shapes[3], shapes[4], long_gqa}) add_fp8(t, s, DType::Bf16);
  add_fp8(t, shapes[2], DType::F32);  // f32 q, k, v quantized as they are, out's dequantization into floats
});

}  // namespace
}  // namespace fp8kit::testing
