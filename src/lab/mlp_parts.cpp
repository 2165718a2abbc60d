// `fp8kit lab` Parts 2 and 3: the lab's MLP (models/mlp.h) trained in bf16 and in FP8 with the lab's
// recipe, then served in bf16 and with real E4M3 weights and activations, measured on options.device.
#include "lab/lab.h"

#include "base/error.h"
#include "exec/captured_step.h"
#include "lab/crossover.h"
#include "models/mlp.h"
#include "nn/init.h"
#include "numerics/cast.h"
#include "ops/elementwise.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace fp8kit::lab {

namespace {

using Clock = std::chrono::steady_clock;

// The lab's FP8 recipe: DelayedScaling(fp8_format=Format.HYBRID, amax_history_len=16,
// amax_compute_algo="most_recent").
Fp8Recipe lab_recipe() {
  Fp8Recipe r;
  r.mode = ScalingMode::Delayed;
  r.lag = ScalingLag::Te;
  r.amax_history_length = 16;
  r.amax_algorithm = AmaxAlgorithm::MostRecent;
  r.forward_format = Fp8Format::E4M3;
  r.backward_format = Fp8Format::E5M2;
  return r;
}

std::vector<int64_t> batches_or(const std::vector<int64_t>& given, Device device, std::vector<int64_t> gpu,
                                std::vector<int64_t> cpu) {
  std::vector<int64_t> b = !given.empty() ? given : device == Device::Cpu ? cpu : gpu;
  for (int64_t rows : b) FP8KIT_CHECK(rows >= 1, "lab: batch sizes must be >= 1, got {}", rows);
  std::sort(b.begin(), b.end());
  b.erase(std::unique(b.begin(), b.end()), b.end());
  return b;
}

// torch.randn(rows, cols, dtype=torch.bfloat16): normal draws rounded to bf16, as f32 values on the host.
std::vector<float> randn_bf16(int64_t rows, int64_t cols, std::mt19937_64& rng) {
  std::vector<float> v(static_cast<size_t>(rows * cols));
  nn::fill_normal(v, 1.0f, rng);
  for (float& x : v) x = round_bf16(x);
  return v;
}

Tensor f32_tensor(const std::vector<float>& v, int64_t rows, int64_t cols, Device device) {
  Tensor t({rows, cols}, DType::F32);
  std::copy(v.begin(), v.end(), t.data<float>());
  return t.to(device);
}

Tensor bf16_tensor(const std::vector<float>& v, int64_t rows, int64_t cols, Device device) {
  Tensor t({rows, cols}, DType::Bf16);
  std::transform(v.begin(), v.end(), t.data<uint16_t>(), [](float x) { return float_to_bf16(x); });
  return t.to(device);
}

std::vector<float> host_floats(const Tensor& t) {
  const Tensor h = t.to(Device::Cpu);
  if (h.dtype() == DType::F32) return {h.data<float>(), h.data<float>() + h.numel()};
  std::vector<float> v(static_cast<size_t>(h.numel()));
  std::transform(h.data<uint16_t>(), h.data<uint16_t>() + h.numel(), v.begin(), bf16_to_float);
  return v;
}

std::string fixed(double v, int digits) { return fmt::format("{:.{}f}", v, digits); }
std::string precision_name(nn::Precision p) { return p == nn::Precision::Fp8 ? "fp8" : "bf16"; }

// ---- Part 2 ----

struct TrainRun {
  double ms_per_step = 0, steps_per_second = 0, final_loss = 0, mean_loss = 0;
  std::vector<double> losses;  // the timed steps'
};

// The lab's benchmark_training: warm-up steps, then timed steps (each one captured CUDA graph replay
// on the GPU; every step's loss copied aside on the device, read once at the end), wall time between
// two synchronisations.
TrainRun train(nn::Precision precision, int64_t rows, const LabOptions& o) {
  const models::MlpConfig config;
  models::Mlp model(config, o.seed, o.device);
  model.set_precision(precision, lab_recipe());
  std::mt19937_64 rng(o.seed + static_cast<uint64_t>(rows));  // the same data for both precisions
  const Tensor x = f32_tensor(randn_bf16(rows, config.input, rng), rows, config.input, o.device);
  const Tensor y = f32_tensor(randn_bf16(rows, config.output, rng), rows, config.output, o.device);
  ops::Context& c = model.context();
  exec::CapturedStep step([&](ops::Context&) { model.train_step(x, y); });
  for (int i = 0; i < o.warmup_steps; ++i) step.run(c);
  Tensor losses({o.timed_steps}, DType::F32, o.device);
  c.synchronize();
  const auto start = Clock::now();
  for (int i = 0; i < o.timed_steps; ++i) {
    step.run(c);
    Tensor slot = losses.view(i, {1});
    ops::copy(c, model.loss(), slot);
  }
  c.synchronize();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  TrainRun r;
  const std::vector<float> l = host_floats(losses);
  r.losses.assign(l.begin(), l.end());
  r.ms_per_step = seconds / o.timed_steps * 1e3;
  r.steps_per_second = o.timed_steps / seconds;
  r.final_loss = r.losses.back();
  double sum = 0;
  for (double v : r.losses) sum += v;
  r.mean_loss = sum / static_cast<double>(r.losses.size());
  return r;
}

// ---- Part 3 ----

struct Quality {
  double mean_abs = 0, max_abs = 0, relative_pct = 0;
};

// The lab's comparison: diff = |reference - other|; relative error = mean(diff) / mean(|reference|).
Quality compare(const std::vector<float>& reference, const std::vector<float>& other) {
  double diff = 0, ref = 0, worst = 0;
  for (size_t i = 0; i < reference.size(); ++i) {
    const double d = std::abs(static_cast<double>(reference[i]) - other[i]);
    diff += d;
    ref += std::abs(static_cast<double>(reference[i]));
    worst = std::max(worst, d);
  }
  const double n = static_cast<double>(reference.size());
  return {diff / n, worst, ref > 0 ? diff / ref * 100.0 : 0.0};
}

struct InferRun {
  double ms = 0, per_second = 0, rows_per_second = 0;
  std::vector<float> output;
};

// The lab's benchmark_inference: warm-up runs, then timed runs (options' warm-up and timed steps), each
// one captured CUDA graph replay on the GPU.
InferRun infer(models::Mlp& model, const Tensor& x, const LabOptions& o) {
  ops::Context& c = model.context();
  Tensor y;
  exec::CapturedStep step([&](ops::Context&) { model.infer(x, y); });
  for (int i = 0; i < o.warmup_steps; ++i) step.run(c);
  c.synchronize();
  const auto start = Clock::now();
  for (int i = 0; i < o.timed_steps; ++i) step.run(c);
  c.synchronize();
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
  InferRun r;
  r.ms = seconds / o.timed_steps * 1e3;
  r.per_second = o.timed_steps / seconds;
  r.rows_per_second = r.per_second * static_cast<double>(x.dim(0));
  r.output = host_floats(y);
  return r;
}

// The lab's simulate_fp8_inference on the weights: per parameter scale = amax / 448, then
// round(w / scale * 2^3) / 2^3 * scale (a uniform grid of scale / 8, not the E4M3 grid).
void simulate_lab_fp8(models::Mlp& model) {
  for (nn::Parameter* p : model.parameter_set().parameters()) {
    Tensor host = p->value.to(Device::Cpu);
    const std::span<float> w = host.span<float>();
    float amax = 0;
    for (float v : w) amax = std::max(amax, std::abs(v));
    const float scale = std::max(amax / 448.0f, 1e-10f);
    for (float& v : w) v = std::nearbyint(v / scale * 8.0f) / 8.0f * scale;
    p->value.copy_from_host(host.data<float>());
  }
}

void check_options(const LabOptions& o) {
  FP8KIT_CHECK(o.warmup_steps >= 0 && o.timed_steps >= 1, "lab: needs warm-up steps >= 0 and timed steps >= 1, got {} and {}",
               o.warmup_steps, o.timed_steps);
  FP8KIT_CHECK(!o.out.empty(), "lab: the output directory (options.out) is not set");
}

std::string csv_path(const LabOptions& o, const char* name) { return (o.out / name).string(); }

}  // namespace

void training_part(report::HtmlPage& page, const LabOptions& options) {
  check_options(options);
  const bool gpu = options.device != Device::Cpu;
  const std::vector<int64_t> batches =
      batches_or(options.train_batches, options.device, {32, 1024, 8192, 16384, 32768}, {32, 256});
  std::vector<TrainRun> bf16, fp8;
  for (int64_t rows : batches) {
    bf16.push_back(train(nn::Precision::Bf16, rows, options));
    fp8.push_back(train(nn::Precision::Fp8, rows, options));
  }

  page.heading("Part 2: FP8 training");
  page.paragraph(fmt::format(
      "The lab's SimpleMLP (fc1 768 -> 3072 with bias, GELU, fc2 3072 -> 768 with bias; 4.7M parameters) "
      "trained with AdamW (lr 1e-4, PyTorch's defaults otherwise) on the MSE between its output and a fixed "
      "random target, x and y drawn once from a normal distribution and rounded to bf16, as the lab's "
      "benchmark_training does: {} warm-up steps, then {} timed steps, on the {}, timed between two "
      "synchronisations (the lab's loss.item() waits for every step; here each step's loss is copied aside on "
      "the device and read at the end). bf16 is mixed bf16 "
      "(bf16 GEMM operands, fp32 accumulation and master weights); FP8 is the lab's recipe: E4M3 inputs "
      "and weights, E5M2 output gradients (HYBRID), delayed scaling with an amax history of 16 and "
      "the most recent amax. GELU is the tanh approximation (Transformer Engine's and cuBLASLt's); fc1's "
      "bias and GELU are applied as fc2's input is cast, and fc1's backward makes no gradient for x (data, "
      "as in PyTorch). {}",
      options.warmup_steps, options.timed_steps, gpu ? "GPU" : "CPU",
      gpu ? "Each step is one CUDA graph: forward, loss, backward, the FP8 scaling update and AdamW."
          : "The CPU runs every FP8 cast exactly and multiplies the decoded codes in float32: its timings "
            "show the emulation's cost, not FP8's speed."));

  std::vector<report::CsvRow> csv, rows;
  for (size_t i = 0; i < batches.size(); ++i) {
    const double speedup = bf16[i].ms_per_step / fp8[i].ms_per_step;
    const double diff = std::abs(fp8[i].final_loss - bf16[i].final_loss);
    for (const auto& [p, r] : {std::pair{nn::Precision::Bf16, &bf16[i]}, std::pair{nn::Precision::Fp8, &fp8[i]}}) {
      const bool is_fp8 = p == nn::Precision::Fp8;  // the comparison columns are FP8's against bf16
      csv.push_back({std::to_string(batches[i]), precision_name(p), std::to_string(options.warmup_steps),
                     std::to_string(options.timed_steps), fixed(r->ms_per_step, 4), fixed(r->steps_per_second, 2),
                     fmt::format("{:.6g}", r->final_loss), fmt::format("{:.6g}", r->mean_loss),
                     is_fp8 ? fixed(speedup, 4) : "", is_fp8 ? fmt::format("{:.6g}", diff) : ""});
    }
    rows.push_back({std::to_string(batches[i]), fixed(bf16[i].ms_per_step, 3), fixed(fp8[i].ms_per_step, 3),
                    fixed(speedup, 2) + "x", fixed(bf16[i].steps_per_second, 1), fixed(fp8[i].steps_per_second, 1),
                    fixed(bf16[i].final_loss, 4), fixed(fp8[i].final_loss, 4), fmt::format("{:.6f}", diff),
                    fixed(diff / bf16[i].final_loss * 100.0, 3) + "%"});
  }
  report::write_csv(csv_path(options, "lab_training.csv"),
                    {"batch", "precision", "warmup_steps", "timed_steps", "ms_per_step", "steps_per_second",
                     "final_loss", "mean_loss", "speedup_vs_bf16", "final_loss_difference"},
                    csv);
  page.table({"rows", "bf16 ms/step", "FP8 ms/step", "speedup", "bf16 steps/s", "FP8 steps/s", "bf16 final loss",
              "FP8 final loss", "loss difference", "relative"},
             rows, "Training: time per step and loss after the timed steps, bf16 against FP8");

  std::vector<double> bf16_ms, fp8_ms;
  for (size_t i = 0; i < batches.size(); ++i) {
    bf16_ms.push_back(bf16[i].ms_per_step);
    fp8_ms.push_back(fp8[i].ms_per_step);
  }
  const std::optional<size_t> from = fp8_wins_from(bf16_ms, fp8_ms);
  const size_t last = batches.size() - 1;
  const double best_speedup = bf16[last].ms_per_step / fp8[last].ms_per_step;
  const double last_diff_pct = std::abs(fp8[last].final_loss - bf16[last].final_loss) / bf16[last].final_loss * 100.0;
  if (!gpu) {
    page.callout("On the CPU FP8 is emulated (every cast exact, the GEMMs in float32 on decoded codes), so it "
                 "costs more than bf16 at every size; the speed comparison belongs to a GPU with FP8 tensor cores.",
                 report::Tone::Info);
  } else if (!from) {
    std::string faster;
    for (size_t i = 0; i < batches.size(); ++i)
      if (fp8_ms[i] < bf16_ms[i]) faster += (faster.empty() ? "" : ", ") + std::to_string(batches[i]);
    page.callout(fmt::format("FP8 was not faster than bf16 at the largest size measured ({} rows: {:.2f}x); faster "
                             "at {}.",
                             batches[last], best_speedup, faster.empty() ? "no size measured" : faster + " rows"),
                 report::Tone::Warn);
  } else {
    page.callout(fmt::format("FP8 is faster from {} rows on ({:.2f}x at {} rows).", batches[*from], best_speedup,
                             batches[last]),
                 report::Tone::Good);
  }
  if (gpu && from != std::optional<size_t>{0}) {
    page.paragraph(
        "Below that size a step is not bound by its GEMMs, which is all FP8 speeds up: at a few rows the six GEMMs of "
        "a step (768 x 3072 and 3072 x 768, forward, dgrad, wgrad) take microseconds each, and the step's time is "
        "kernel launches and the passes FP8 adds around every GEMM: quantizing the input, the weights and the "
        "gradient (with their amaxes and the transposed copies wgrad reads), the scaling update, "
        "besides the same bias, GELU and optimizer passes as bf16. Those are the launch and cast overheads; "
        "the GEMMs' share, and FP8's advantage, grows with the rows.");
  }
  page.callout(fmt::format("The lab expects a 1.5-2x speedup over bf16 and a loss difference under 1% (on Blackwell, "
                           "with Transformer Engine). Measured here at {} rows: {:.2f}x and {:.3f}%.",
                           batches[last], best_speedup, last_diff_pct),
               gpu && best_speedup >= 1.5 && last_diff_pct < 1.0 ? report::Tone::Good : report::Tone::Info);

  report::LinePlot time_plot{.title = "Training step time",
                             .x = {.label = "rows per step", .log = true},
                             .y = {.label = "ms per step", .log = true}};
  report::PlotSeries bt{.label = "bf16"}, ft{.label = "FP8"};
  for (size_t i = 0; i < batches.size(); ++i) {
    bt.x.push_back(static_cast<double>(batches[i]));
    bt.y.push_back(bf16[i].ms_per_step);
    ft.x.push_back(static_cast<double>(batches[i]));
    ft.y.push_back(fp8[i].ms_per_step);
  }
  time_plot.series = {bt, ft};
  page.plot(time_plot, "ms per training step against rows per step");

  // The loss curves at the lab's size (its batch 32 when measured, else the smallest).
  const auto lab_size = std::find(batches.begin(), batches.end(), 32);
  const size_t at = lab_size != batches.end() ? static_cast<size_t>(lab_size - batches.begin()) : 0;
  report::LinePlot loss_plot{.title = fmt::format("Loss per timed step, {} rows", batches[at]),
                             .x = {.label = "timed step"},
                             .y = {.label = "MSE loss"}};
  report::PlotSeries bl{.label = "bf16"}, fl{.label = "FP8", .dashed = true};
  std::vector<report::CsvRow> curve;
  for (size_t s = 0; s < bf16[at].losses.size(); ++s) {
    bl.x.push_back(static_cast<double>(s + 1));
    bl.y.push_back(bf16[at].losses[s]);
    fl.x.push_back(static_cast<double>(s + 1));
    fl.y.push_back(fp8[at].losses[s]);
    curve.push_back({std::to_string(s + 1), std::to_string(batches[at]), fmt::format("{:.6g}", bf16[at].losses[s]),
                     fmt::format("{:.6g}", fp8[at].losses[s])});
  }
  loss_plot.series = {bl, fl};
  page.plot(loss_plot, "bf16 and FP8 from the same weights and data");
  report::write_csv(csv_path(options, "lab_training_losses.csv"), {"step", "batch", "bf16_loss", "fp8_loss"}, curve);
  page.links({{"lab_training.csv", "lab_training.csv"}, {"lab_training_losses.csv", "lab_training_losses.csv"}});
}

void inference_part(report::HtmlPage& page, const LabOptions& options) {
  check_options(options);
  const bool gpu = options.device != Device::Cpu;
  const std::vector<int64_t> batches = batches_or(options.infer_batches, options.device, {32, 1024, 16384}, {32, 256});
  const models::MlpConfig config;
  models::Mlp bf16(config, options.seed, options.device), fp8(config, options.seed, options.device),
      simulated(config, options.seed, options.device);
  bf16.set_precision(nn::Precision::Bf16);
  fp8.set_precision(nn::Precision::Fp8);
  simulated.set_precision(nn::Precision::Bf16);
  simulate_lab_fp8(simulated);

  page.heading("Part 3: FP8 inference");
  page.paragraph(
      "The same MLP (the same initial weights) served three ways from a bf16 input drawn as the lab's test_input: "
      "bf16 (bf16 weights and activations, fc1's bias and GELU in its GEMM's epilogue); FP8 with "
      "real E4M3 codes for "
      "weights and activations (per-tensor scales: the weights' from their own amax, the activations' static, "
      "calibrated once on the batch being served from a bf16 forward: amax of fc1's input and of the GELU's "
      "output, scale = 448 / amax; fc1 quantizes its input at that scale inside the product and its epilogue "
      "writes fc2's input as E4M3 directly, on a GPU from 256 rows in fp8kit's own short-k kernel, whose "
      "epilogue overlaps the next tile's products; fp32 accumulation, bf16 outputs); and the lab's simulated "
      "FP8, its weights rounded to multiples of amax / 448 / 8 (the lab's "
      "simulate_fp8_inference, a uniform grid rather than E4M3's) and served in bf16. Errors are against the bf16 "
      "output, as the lab computes them: mean and max of |bf16 - other|, and mean |difference| over mean |bf16|.");

  std::vector<report::CsvRow> csv, quality_rows, speed_rows;
  std::vector<double> bf16_ms, fp8_ms;
  for (int64_t rows : batches) {
    std::mt19937_64 rng(options.seed + 1000 + static_cast<uint64_t>(rows));
    const Tensor x = bf16_tensor(randn_bf16(rows, config.input, rng), rows, config.input, options.device);
    for (models::Mlp* m : {&bf16, &fp8, &simulated}) m->prepare_inference(x);
    const InferRun b = infer(bf16, x, options), f = infer(fp8, x, options);
    const InferRun s = infer(simulated, x, {.warmup_steps = 0, .timed_steps = 1});
    const Quality qf = compare(b.output, f.output), qs = compare(b.output, s.output);
    bf16_ms.push_back(b.ms);
    fp8_ms.push_back(f.ms);
    // bf16 is the reference: no error of its own.
    for (const auto& [name, r, q] : {std::tuple{"bf16", &b, std::optional<Quality>{}}, std::tuple{"fp8", &f, std::optional{qf}}})
      csv.push_back({std::to_string(rows), name, fixed(r->ms, 5), fixed(r->per_second, 1), fixed(r->rows_per_second, 0),
                     q ? fmt::format("{:.6g}", q->mean_abs) : "", q ? fmt::format("{:.6g}", q->max_abs) : "",
                     q ? fmt::format("{:.6g}", q->relative_pct) : ""});
    csv.push_back({std::to_string(rows), "lab_simulated_fp8_weights", "", "", "", fmt::format("{:.6g}", qs.mean_abs),
                   fmt::format("{:.6g}", qs.max_abs), fmt::format("{:.6g}", qs.relative_pct)});
    quality_rows.push_back({std::to_string(rows), fmt::format("{:.6f}", qf.mean_abs), fmt::format("{:.6f}", qf.max_abs),
                            fixed(qf.relative_pct, 4) + "%", fmt::format("{:.6f}", qs.mean_abs),
                            fmt::format("{:.6f}", qs.max_abs), fixed(qs.relative_pct, 4) + "%",
                            fmt::format("{:.4g} / {:.4g}", fp8.input_scale(0), fp8.input_scale(1))});
    speed_rows.push_back({std::to_string(rows), fixed(b.ms, 4), fixed(f.ms, 4), fixed(b.ms / f.ms, 2) + "x",
                          fixed(b.rows_per_second, 0), fixed(f.rows_per_second, 0)});
  }
  report::write_csv(csv_path(options, "lab_inference.csv"),
                    {"batch", "precision", "ms_per_inference", "inferences_per_second", "rows_per_second",
                     "mean_abs_diff", "max_abs_diff", "relative_error_pct"},
                    csv);
  page.table({"rows", "FP8 mean |diff|", "FP8 max |diff|", "FP8 relative error", "simulated mean |diff|",
              "simulated max |diff|", "simulated relative error", "activation scales (fc1 / fc2)"},
             quality_rows, "Inference quality against bf16: real E4M3 weights and activations, and the lab's simulation");
  page.table({"rows", "bf16 ms", "FP8 ms", "speedup", "bf16 rows/s", "FP8 rows/s"}, speed_rows,
             fmt::format("Inference latency and throughput ({} timed runs after {} warm-up runs{})", options.timed_steps,
                         options.warmup_steps, gpu ? ", each one CUDA graph" : ""));
  const size_t last = batches.size() - 1;
  page.callout(fmt::format("The lab expects FP8 inference about 2x faster than bf16 (on Blackwell), with half the "
                           "activation memory. Measured here: {:.2f}x at {} rows{}.",
                           bf16_ms[last] / fp8_ms[last], batches[last],
                           gpu ? "" : " (the CPU emulates FP8: its timings are not FP8's speed)"),
               report::Tone::Info);
  page.paragraph(
      "E4M3's 3 mantissa bits round a value by up to 1/16 of its power of two (about 2% on average); real FP8 "
      "rounds the weights and the inputs of both layers, and those errors add, so a few percent of the output's "
      "magnitude is what per-tensor E4M3 gives for this MLP. The lab's simulation rounds only the weights, to a "
      "uniform grid of amax / 448 / 8 that is finer than E4M3's for all but the smallest weights, and so "
      "understates the error of real FP8 inference.");
  page.links({{"lab_inference.csv", "lab_inference.csv"}});
}

}  // namespace fp8kit::lab
