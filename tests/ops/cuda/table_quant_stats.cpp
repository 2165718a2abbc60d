// Op table rows: quant_stats (E4M3 and E5M2, multiply and Keras's divide, the vector and scalar paths
// and a tensor of several grid strides, with saturating, underflowing, NaN and inf values), and the
// FP8 Linear's health records (inputs, weight, and the output gradient through the dropout's backward,
// which the GPU applies on the fly). Each as two rows: the counts, amax, scale and history max bit for
// bit; the double sums within 1e-6 (summation order, then rounded to float for the comparison).
#include "ops/cuda/op_table.h"
#include "ops/linear.h"
#include "ops/quant_stats.h"
#include "ops/scaling_table.h"

#include <fmt/format.h>

#include <cstring>
#include <limits>

namespace fp8kit::testing {
namespace {

// A record read back as {exact words (sums zeroed), sums as f32} (once c's queued work is done: host
// copies do not wait for its lanes).
std::vector<Tensor> split(ops::Context& c, const Tensor& record, int64_t records) {
  c.synchronize();
  const Tensor host = record.to(Device::Cpu);
  Tensor exact({records, ops::kQuantStatsWords}, DType::I32), sums({records, 2}, DType::F32);
  for (int64_t i = 0; i < records; ++i) {
    ops::QuantStatsRecord r;
    std::memcpy(&r, host.data<int32_t>() + i * ops::kQuantStatsWords, sizeof r);
    sums.data<float>()[2 * i] = static_cast<float>(r.sum_squares);
    sums.data<float>()[2 * i + 1] = static_cast<float>(r.error_squares);
    r.sum_squares = r.error_squares = 0;
    std::memcpy(exact.data<int32_t>() + i * ops::kQuantStatsWords, &r, sizeof r);
  }
  std::vector<Tensor> out;
  out.push_back(std::move(exact));
  out.push_back(std::move(sums));
  return out;
}

// Two rows from one run: its exact part, and its sums with a tolerance.
void add_rows(std::vector<OpCase>& t, const std::string& name, std::function<std::vector<Tensor>(ops::Context&)> run) {
  t.push_back({name + "/counts", [run](ops::Context& c) {
                 std::vector<Tensor> out = run(c);
                 out.pop_back();
                 return out;
               }});
  t.push_back({name + "/sums", [run](ops::Context& c) {
                 std::vector<Tensor> out = run(c);
                 out.erase(out.begin());
                 return out;
               },
               0, 1e-6});
}

const RegisterOps rows([](std::vector<OpCase>& t) {
  for (const Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    for (const bool divide : {false, true}) {
      for (const int64_t n : {int64_t{300 * 260}, int64_t{1001}, int64_t{3'000'001}, int64_t{3'000'000}}) {
        add_rows(t, fmt::format("quant_stats/{}/{}/{}", name(format), divide ? "divide" : "multiply", n),
                 [=](ops::Context& c) {
                   std::vector<float> x = random_values(n, 31, -30.0f, 30.0f);
                   for (int64_t i = 0; i < n; i += 3) x[i] *= 1e-6f;  // underflow
                   x[5] = std::numeric_limits<float>::quiet_NaN();
                   x[7] = -std::numeric_limits<float>::infinity();
                   // Past the max for the values above ~22 (E4M3) or ~19 (E5M2).
                   const float scale = format == Fp8Format::E4M3 ? 20.0f : 3000.0f;
                   const Tensor xs = device_tensor(x, {n}, c.device());
                   const Tensor s = device_tensor({divide ? 1.0f / scale : scale}, {1}, c.device());
                   const Tensor history = device_tensor(random_values(16, 32, 0.0f, 9.0f), {16}, c.device());
                   Tensor record({ops::kQuantStatsWords}, DType::I32, c.device());
                   Tensor partials({ops::kQuantStatsParts * ops::kQuantStatsWords}, DType::I32, c.device());
                   const ops::QuantStatsSpec spec{format, s.device_data<float>(), divide,
                                                  history.device_data<float>(), 16};
                   ops::quant_stats(c, xs, spec, record, partials);
                   return split(c, record, 1);
                 });
      }
    }
  }

  // An FP8 Linear recording its three slots, current scaling (the same scales on both devices); its
  // output gradient goes back through a dropout first.
  add_rows(t, "linear_health/96x256x128/fp8_current", [](ops::Context& c) {
    const Device d = c.device();
    const int64_t rows = 96, in = 256, out = 128;
    Tensor x = device_tensor(random_values(rows * in, 41), {rows, in}, d);
    Tensor w = device_tensor(random_values(in * out, 42, -0.2f, 0.2f), {out, in}, d);
    Tensor b = device_tensor(random_values(out, 43), {out}, d);
    Tensor dy = device_tensor(random_values(rows * out, 44, -1e-3f, 1e-3f), {rows, out}, d);
    Tensor dw(w.shape(), DType::F32, d), db({out}, DType::F32, d);
    Fp8Recipe recipe;
    recipe.mode = ScalingMode::Current;
    ops::ScalingTable scaling(recipe);
    ops::LinearOp l;
    l.in = in;
    l.out = out;
    l.layout = ops::LinearOp::Layout::OutIn;
    l.precision = ops::LinearPrecision::Fp8;
    l.w = &w;
    l.b = &b;
    l.dw = &dw;
    l.db = &db;
    l.scaling = &scaling;
    l.slot = scaling.add_linear("linear");
    scaling.allocate(d);
    scaling.set_recording(true);
    ops::LinearOp* op = &l;
    ops::linear_prepare_weights(c, {&op, 1}, true);
    ops::linear_forward(c, l, x, true);
    const ops::LinearGradient g{&l, &dy, {.site = 3, .rate = 0.25f, .active = true}};
    ops::linear_backward(c, {&g, 1});
    c.join_all();
    Tensor records({3 * ops::kQuantStatsWords}, DType::I32);
    const std::vector<ops::QuantStats> stats = scaling.read_records(c);
    for (int i = 0; i < 3; ++i)
      std::memcpy(records.data<int32_t>() + i * ops::kQuantStatsWords, &stats[i].raw, sizeof stats[i].raw);
    return split(c, records, 3);
  });
});

}  // namespace
}  // namespace fp8kit::testing
