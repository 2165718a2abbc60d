// Op table rows: quantize (every granularity, both formats, f32 and bf16 inputs, current and delayed
// scales, with and without the transpose) and matmul (f32, bf16, and FP8 at every granularity pair);
// and both queued on a context's lane inside a captured step (ops::transpose's operand included).
#include "exec/captured_step.h"
#include "ops/cuda/op_table.h"
#include "ops/matmul.h"
#include "ops/quantize.h"

#include <fmt/format.h>

namespace fp8kit::testing {
namespace {

std::vector<Tensor> outputs(QTensor q) {
  std::vector<Tensor> out;
  out.push_back(std::move(q.codes));
  if (q.codes_t.numel() > 0) out.push_back(std::move(q.codes_t));
  out.push_back(std::move(q.scale_inv));
  out.push_back(std::move(q.amax));
  return out;
}

struct Granular {
  const char* name;
  Granularity granularity;
  int group;
  bool transposable;
};
constexpr Granular kGranularities[] = {{"tensor", Granularity::PerTensor, 128, true},
                                       {"row", Granularity::PerRow, 128, false},
                                       {"1x32", Granularity::PerGroup, 32, false},
                                       {"1x64", Granularity::PerGroup, 64, false},
                                       {"1x128", Granularity::PerGroup, 128, false},
                                       {"128x128", Granularity::Block128x128, 128, true}};

const RegisterOps rows([](std::vector<OpCase>& t) {
  for (const Granular& g : kGranularities) {
    for (const Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
      for (const DType dtype : {DType::F32, DType::Bf16}) {
        for (const bool transpose : {false, true}) {
          if (transpose && !g.transposable) continue;
          const QuantSpec spec{format, g.granularity, g.group};
          t.push_back({fmt::format("quantize/{}/{}/{}{}", g.name, name(format), name(dtype), transpose ? "/t" : ""),
                       [=](ops::Context& c) {
                         const Tensor x =
                             device_tensor(random_values(300 * 260, 1, -30.0f, 30.0f), {300, 260}, c.device(), dtype);
                         return outputs(ops::quantize(x, spec, nullptr, transpose));
                       }});
        }
      }
    }
  }
  t.push_back({"quantize/tensor/e4m3/delayed_scale", [](ops::Context& c) {
                 const Tensor x = device_tensor(random_values(64 * 48, 2, -3.0f, 3.0f), {64, 48}, c.device());
                 const Tensor scale = device_tensor({37.5f}, {1}, c.device());
                 return outputs(ops::quantize(x, {Fp8Format::E4M3}, &scale, true));
               }});

  // matmul: y = a . b^T. fp32 summation order differs between OpenBLAS and cuBLASLt (or, bf16 at
  // m <= 8, the GPU's gemv): tolerances.
  for (const DType dtype : {DType::F32, DType::Bf16}) {
    for (const int64_t m : {96, 1, 8}) {
      t.push_back({fmt::format("matmul/{}{}", name(dtype), m == 96 ? "" : fmt::format("/m{}", m)),
                   [=](ops::Context& c) {
                     const Tensor a = device_tensor(random_values(m * 160, 3), {m, 160}, c.device(), dtype);
                     const Tensor b = device_tensor(random_values(80 * 160, 4), {80, 160}, c.device(), dtype);
                     std::vector<Tensor> y;
                     y.emplace_back(std::vector<int64_t>{m, 80}, DType::F32, c.device());
                     ops::matmul(a, b, y[0]);
                     return y;
                   },
                   1e-4, 1e-4});
    }
  }
  struct Pair {
    const char* name;
    QuantSpec a, b;
  };
  const Pair pairs[] = {{"tensor", {Fp8Format::E4M3}, {Fp8Format::E4M3}},
                        {"tensor_e5m2", {Fp8Format::E5M2}, {Fp8Format::E4M3}},
                        {"row", {Fp8Format::E4M3, Granularity::PerRow}, {Fp8Format::E4M3, Granularity::PerRow}},
                        {"tensor_row", {Fp8Format::E4M3}, {Fp8Format::E4M3, Granularity::PerRow}},
                        {"1x128_128x128",
                         {Fp8Format::E4M3, Granularity::PerGroup, 128},
                         {Fp8Format::E4M3, Granularity::Block128x128}}};
  // FP8: both sides sum the same exact products, but Hopper's FP8 accumulator keeps about 14 mantissa
  // bits between promotions (DeepSeek-V3's "limited accumulation precision"): within ~2^-12 of the
  // sum of |terms| (about 384 here), so atol 0.1. At m <= 8 the per tensor and per row pairs run on
  // the GPU's gemv (fp32 sums: far inside that).
  for (const Pair& p : pairs) {
    for (const int64_t m : {256, 1, 8}) {
      if (m != 256 && p.b.granularity == Granularity::Block128x128) continue;
      t.push_back({fmt::format("matmul/fp8/{}{}", p.name, m == 256 ? "" : fmt::format("/m{}", m)),
                   [=](ops::Context& c) {
                     const Tensor x = device_tensor(random_values(m * 384, 5, -4.0f, 4.0f), {m, 384}, c.device());
                     const Tensor w = device_tensor(random_values(128 * 384, 6), {128, 384}, c.device());
                     std::vector<Tensor> y;
                     y.emplace_back(std::vector<int64_t>{m, 128}, DType::F32, c.device());
                     ops::matmul(ops::quantize(x, p.a), ops::quantize(w, p.b), y[0]);
                     return y;
                   },
                   0.1, 0});
    }
  }

  // GELU in the GEMM's epilogue (cuBLASLt's tanh against the CPU's: float32 ulps before y's rounding),
  // into bf16 from bf16 operands, and from E4M3 operands into the E4M3 codes of y times a static scale
  // (compared dequantized: an E4M3 step where the two round differently, plus the FP8 accumulator's error).
  for (const bool fp8 : {false, true}) {
    t.push_back({fmt::format("matmul/{}/gelu_bias", fp8 ? "fp8/tensor_to_e4m3" : "bf16"),
                 [=](ops::Context& c) {
                   const Tensor x = device_tensor(random_values(96 * 384, 10, -2.0f, 2.0f), {96, 384}, c.device(),
                                                  fp8 ? DType::F32 : DType::Bf16);
                   const Tensor w = device_tensor(random_values(128 * 384, 11), {128, 384}, c.device(),
                                                  fp8 ? DType::F32 : DType::Bf16);
                   const Tensor bias = device_tensor(random_values(128, 12), {128}, c.device(), DType::Bf16);
                   std::vector<Tensor> y;
                   if (!fp8) {
                     y.emplace_back(std::vector<int64_t>{96, 128}, DType::Bf16, c.device());
                     ops::matmul(c, x, w, y[0], {.bias = &bias, .activation = ops::Activation::Gelu});
                     return y;
                   }
                   const Tensor scale = device_tensor({8.0f}, {1}, c.device());
                   QTensor act;
                   act.codes = Tensor({96, 128}, DType::E4M3, c.device());
                   act.scale_inv = device_tensor({1.0f / 8.0f}, {1}, c.device());
                   // Everything on c's stream (the eager quantize and dequantize run on the default
                   // stream, which c's does not wait for): x in [-2, 2] and w in [-1, 1] at static scales.
                   const Tensor x_scale = device_tensor({128.0f}, {1}, c.device());
                   const Tensor w_scale = device_tensor({256.0f}, {1}, c.device());
                   QTensor qx, qw;
                   ops::quantize(c, x, {}, qx, &x_scale);
                   ops::quantize(c, w, {}, qw, &w_scale);
                   ops::matmul(c, qx, qw, act.codes,
                               {.bias = &bias, .activation = ops::Activation::Gelu, .y_scale = &scale,
                                .fast_accumulation = true});
                   y.push_back(ops::dequantize(c, act));
                   return y;
                 },
                 fp8 ? 0.1 : 0.01, fp8 ? 0.13 : 0.01});
  }

  // quantize, transpose and matmul on a context, on lane A, inside a captured step run three times
  // (eager, captured, replayed: nothing may allocate after the first): the block recipe's operands of
  // a fprop y = x w^T and a dgrad dx = g w at shapes of partial groups and blocks. The codes and
  // scales bit for bit; the products within the FP8 accumulator's error (above).
  for (const bool products : {false, true}) {
    t.push_back({fmt::format("context/captured/{}", products ? "matmul" : "quantize"),
                 [=](ops::Context& c) {
                   const Tensor x = device_tensor(random_values(200 * 300, 7, -4.0f, 4.0f), {200, 300}, c.device());
                   const Tensor w = device_tensor(random_values(130 * 300, 8), {130, 300}, c.device());
                   const Tensor g = device_tensor(random_values(200 * 130, 9), {200, 130}, c.device());
                   QTensor xq, wq, wq_t, gq;
                   std::vector<Tensor> y;
                   y.emplace_back(std::vector<int64_t>{200, 130}, DType::F32, c.device());
                   y.emplace_back(std::vector<int64_t>{200, 300}, DType::F32, c.device());
                   const QuantSpec groups{Fp8Format::E4M3, Granularity::PerGroup, 128};
                   exec::CapturedStep step([&](ops::Context& c) {
                     c.fork(ops::Lane::A);
                     {
                       const ops::Context::OnLane lane(c, ops::Lane::A);
                       ops::quantize(c, x, groups, xq);
                       ops::quantize(c, w, {Fp8Format::E4M3, Granularity::Block128x128}, wq, nullptr, true);
                       ops::transpose(c, wq, wq_t);
                       ops::quantize(c, g, {Fp8Format::E5M2, Granularity::PerGroup, 128}, gq);
                       ops::matmul(c, xq, wq, y[0]);
                       ops::matmul(c, gq, wq_t, y[1]);
                     }
                     c.join(ops::Lane::A);
                   });
                   for (int run = 0; run < 3; ++run) step.run(c);
                   c.synchronize();
                   if (products) return y;
                   std::vector<Tensor> out;
                   for (QTensor* q : {&xq, &wq_t, &gq})
                     for (Tensor& o : outputs(std::move(*q))) out.push_back(std::move(o));
                   return out;
                 },
                 products ? 0.1 : 0, 0});
  }
});

}  // namespace
}  // namespace fp8kit::testing
