// Op table rows of inference's exact ops, bit for bit: accumulate_activation_stats (f32 and bf16, 16-byte
// and element-wise loads, values from 2^-40 to 2^40 with NaN, inf and zeros, two calls accumulating,
// with and without the histogram; maxima and integer counts do not depend on the order), argmax_rows
// (a Llama-3 vocabulary at batch 1 and 64, bf16 ties, NaN rows, odd n read element by element),
// fill_normal (the CPU's generator on the GPU, f32 and bf16, a length not a multiple of 8) and
// gather_rows (a bf16 embedding table, an f32 one with odd rows, the first and last ids, repeats).
#include "numerics/histogram.h"
#include "ops/activation_stats.h"
#include "ops/cuda/op_table.h"
#include "ops/embedding.h"
#include "ops/init.h"
#include "ops/sampling.h"

#include <fmt/format.h>

#include <cmath>
#include <limits>
#include <random>

namespace fp8kit::testing {
namespace {

struct Shape {
  int64_t rows, cols;
};

// Magnitudes 2^-40 .. 2^40 of both signs, with NaN, -inf and zeros.
std::vector<float> stats_values(Shape s, uint64_t seed) {
  auto v = random_values(s.rows * s.cols, seed, -40.0f, 40.0f);
  const auto signs = random_values(v.size(), seed + 1);
  for (size_t i = 0; i < v.size(); ++i) v[i] = std::copysign(std::exp2(v[i]), signs[i]);
  for (size_t i = 0; i < v.size(); i += 97) v[i] = std::numeric_limits<float>::quiet_NaN();
  for (size_t i = 5; i < v.size(); i += 101) v[i] = -std::numeric_limits<float>::infinity();
  for (size_t i = 7; i < v.size(); i += 89) v[i] = 0.0f;
  return v;
}

const RegisterOps rows([](std::vector<OpCase>& t) {
  for (const Shape s : {Shape{1, 1}, Shape{65, 37}, Shape{130, 1000}, Shape{300, 4096}}) {
    for (const DType dtype : {DType::F32, DType::Bf16}) {
      for (const bool histogram : {true, false}) {
        t.push_back({fmt::format("accumulate_activation_stats/{}x{}/{}{}", s.rows, s.cols, name(dtype),
                                 histogram ? "" : "/no_histogram"),
                     [=](ops::Context& c) {
                       std::vector<Tensor> out;
                       out.push_back(device_tensor(std::vector<float>(s.cols, 0.0f), {s.cols}, c.device()));
                       out.push_back(
                           device_ints(std::vector<int32_t>(kHistogramBins, 0), {kHistogramBins}, c.device()));
                       for (uint64_t call = 0; call < 2; ++call) {
                         const Tensor x =
                             device_tensor(stats_values(s, 60 + 2 * call), {s.rows, s.cols}, c.device(), dtype);
                         ops::accumulate_activation_stats(c, x, out[0], histogram ? &out[1] : nullptr);
                         c.synchronize();
                       }
                       if (!histogram) out.pop_back();
                       return out;
                     }});
      }
    }
  }

  for (const Shape s : {Shape{1, 128256}, Shape{64, 128256}, Shape{5, 1001}, Shape{3, 4}}) {
    for (const DType dtype : {DType::F32, DType::Bf16}) {
      t.push_back({fmt::format("argmax_rows/{}x{}/{}", s.rows, s.cols, name(dtype)), [=](ops::Context& c) {
                     auto v = random_values(s.rows * s.cols, 70, -10.0f, 10.0f);
                     if (s.cols == 4) {  // a NaN row, a NaN before the maximum, ties
                       v = {NAN, NAN, NAN, NAN, NAN, 1, 2, NAN, 3, 3, -1, 3};
                     }
                     const Tensor logits = device_tensor(v, {s.rows, s.cols}, c.device(), dtype);
                     std::vector<Tensor> out(1);
                     ops::argmax_rows(c, logits, out[0]);
                     c.synchronize();
                     return out;
                   }});
    }
  }

  for (const DType dtype : {DType::F32, DType::Bf16}) {
    for (const int64_t n : {int64_t{1}, int64_t{1000003}, int64_t{4096} * 4097}) {
      t.push_back({fmt::format("fill_normal/{}/{}", n, name(dtype)), [=](ops::Context& c) {
                     std::vector<Tensor> out;
                     out.emplace_back(std::vector<int64_t>{n}, dtype, c.device());
                     ops::fill_normal(c, out[0], 0.02f, 5);
                     c.synchronize();
                     return out;
                   }});
    }
  }

  struct Gather {
    int64_t n, dim, rows;
    DType dtype;
  };
  for (const Gather g :
       {Gather{1000, 4096, 64, DType::Bf16}, Gather{50, 33, 7, DType::F32}, Gather{10, 7, 12, DType::Bf16}}) {
    t.push_back({fmt::format("gather_rows/{}x{}/{}/{}", g.n, g.dim, g.rows, name(g.dtype)), [=](ops::Context& c) {
                   std::mt19937 rng(8);
                   std::vector<int32_t> ids(g.rows);
                   for (int32_t& id : ids) id = static_cast<int32_t>(rng() % g.n);
                   ids.front() = static_cast<int32_t>(g.n - 1);
                   ids.back() = 0;
                   ids[1] = ids[2];
                   const Tensor table = device_tensor(random_values(g.n * g.dim, 9), {g.n, g.dim}, c.device(), g.dtype);
                   std::vector<Tensor> out(1);
                   ops::gather_rows(c, table, device_ints(ids, {g.rows}, c.device()), out[0]);
                   c.synchronize();
                   return out;
                 }});
  }
});

}  // namespace
}  // namespace fp8kit::testing
