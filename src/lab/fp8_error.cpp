// Quantization error measurements with the real FP8 casts (see fp8_error.h).
#include "lab/fp8_error.h"

#include "numerics/cast.h"
#include "numerics/convert.h"
#include "numerics/scale.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

namespace fp8kit::lab {

float Normal::operator()() {
  const double u1 = uniform(), u2 = uniform();
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
}

double Normal::uniform() { return (static_cast<double>(rng_() >> 11) + 0.5) * 0x1p-53; }

std::vector<float> normal_tensor(Normal& normal, size_t n, float sigma) {
  std::vector<float> x(n);
  for (float& v : x) v = normal() * sigma;
  return x;
}

ErrorStats compare(const std::vector<float>& x, const std::vector<float>& back, Fp8Format format, float scale) {
  ErrorStats s;
  double signal = 0, noise = 0, magnitude = 0;
  size_t flushed = 0, saturated = 0, nonzero = 0;
  // Values up to half a step above fp8_max round down to it anyway; beyond that they are clamped.
  const float saturation = fp8_max(format) * (1.0f + std::ldexp(1.0f, -info(format).mantissa_bits - 1));
  for (size_t i = 0; i < x.size(); ++i) {
    const double e = std::fabs(static_cast<double>(back[i]) - x[i]);
    s.mean_abs += e, s.max_abs = std::max(s.max_abs, e);
    signal += static_cast<double>(x[i]) * x[i], noise += e * e, magnitude += std::fabs(x[i]);
    if (x[i] != 0.0f) s.element_relative += e / std::fabs(x[i]), ++nonzero;
    flushed += x[i] != 0.0f && back[i] == 0.0f;
    saturated += std::fabs(x[i] * scale) > saturation;
  }
  const auto n = static_cast<double>(x.size());
  s.mean_abs /= n;
  s.relative = magnitude > 0 ? s.mean_abs * n / magnitude : 0.0;
  s.element_relative = nonzero > 0 ? s.element_relative / static_cast<double>(nonzero) : 0.0;
  s.snr_db = noise > 0 ? 10.0 * std::log10(signal / noise) : std::numeric_limits<double>::infinity();
  s.flushed_pct = 100.0 * static_cast<double>(flushed) / n;
  s.saturated_pct = 100.0 * static_cast<double>(saturated) / n;
  return s;
}

ErrorStats quantization_error(const std::vector<float>& x, Fp8Format format, float scale) {
  std::vector<uint8_t> q(x.size());
  quantize_fp8(x, scale, format, q);
  std::vector<float> back(x.size());
  dequantize_fp8(q, format, 1.0f / scale, back);
  return compare(x, back, format, scale);
}

std::vector<SampleTensor> sample_tensors(uint64_t seed) {
  Normal normal(seed);
  constexpr size_t n = 1 << 16;
  std::vector<SampleTensor> t;
  t.push_back({"weights N(0, 0.02)", normal_tensor(normal, n, 0.02f)});
  std::vector<float> activations = normal_tensor(normal, n, 1.0f);
  for (float& v : activations) {
    if (normal.uniform() < 0.001) v *= 200.0f;  // 0.1% outlier features, as in LLM activations
  }
  t.push_back({"activations N(0,1) + 0.1% x200 outliers", std::move(activations)});
  std::vector<float> gradients = normal_tensor(normal, n, 1e-6f);
  for (float& v : gradients) v *= std::exp(1.5f * normal());  // magnitudes spread over ~3 decades
  t.push_back({"gradients ~1e-6, log-normal spread", std::move(gradients)});
  t.push_back({"lab exercise 2: randn * 10", normal_tensor(normal, 10000, 10.0f)});
  return t;
}

float lab_model(float v, Fp8Format format) {
  const float m = std::ldexp(1.0f, info(format).mantissa_bits);
  return std::nearbyint(std::clamp(v, -fp8_max(format), fp8_max(format)) * m) / m;
}

MagnitudeSweep magnitude_sweep(float first_decade, float decades, int points) {
  MagnitudeSweep s;
  s.magnitude.resize(points);
  for (int k = 0; k < 2; ++k) s.real[k].resize(points), s.lab[k].resize(points);
  for (int i = 0; i < points; ++i) {
    const float v = std::pow(10.0f, first_decade + decades * static_cast<float>(i) / static_cast<float>(points - 1));
    s.magnitude[i] = v;
    for (int k = 0; k < 2; ++k) {
      const Fp8Format f = kFormats[k];
      s.real[k][i] = std::fabs(decode_fp8(encode_fp8(v, f), f) - v) / v;
      s.lab[k][i] = std::fabs(lab_model(v, f) - v) / v;
    }
  }
  return s;
}

void worst_per_bin(const MagnitudeSweep& sweep, const std::vector<double>& error, int per_bin, std::vector<double>& x,
                   std::vector<double>& y) {
  const auto points = static_cast<int>(sweep.magnitude.size());
  for (int b = 0; (b + 1) * per_bin < points; ++b) {
    const auto first = error.begin() + b * per_bin;
    x.push_back(std::sqrt(sweep.magnitude[b * per_bin] * sweep.magnitude[(b + 1) * per_bin]));
    y.push_back(*std::max_element(first, first + per_bin + 1));
  }
}

std::vector<Scenario> delayed_scenarios() {
  return {
      {"linear_growth", "std 0.1 + 0.1 t (the lab's)", [](int t) { return 0.1f + 0.1f * static_cast<float>(t); }},
      {"fast_growth", "std x1.5 per step", [](int t) { return 0.01f * std::pow(1.5f, static_cast<float>(t)); }},
      {"spike", "std 1, x10000 at step 10", [](int t) { return t == 10 ? 1e4f : 1.0f; }},
      {"decay", "std x0.7 per step", [](int t) { return 100.0f * std::pow(0.7f, static_cast<float>(t)); }},
  };
}

std::vector<Method> scaling_methods() {
  std::vector<Method> m;
  for (size_t length : {4, 8, 16, 32}) {
    m.push_back({fmt::format("delayed, max of {}", length), {.amax_history_length = length}});
  }
  m.push_back({"delayed, most_recent", {.amax_history_length = 16, .amax_algorithm = AmaxAlgorithm::MostRecent}});
  m.push_back({"delayed keras lag, max of 16", {.lag = ScalingLag::Keras, .amax_history_length = 16}});
  m.push_back({"current (this tensor's amax)", {.mode = ScalingMode::Current, .amax_history_length = 1}});
  return m;
}

std::vector<StepResult> simulate(const Scenario& scenario, const Fp8Recipe& recipe, int steps, uint64_t seed) {
  constexpr Fp8Format f = Fp8Format::E4M3;
  Normal normal(seed);  // the same tensors for every method
  ScalingState state(recipe.amax_history_length);
  std::vector<StepResult> results;
  for (int t = 0; t < steps; ++t) {
    const float magnitude = scenario.magnitude(t);
    const std::vector<float> x = normal_tensor(normal, 1000, magnitude);
    const float a = amax(x);
    state.scale_for_step(recipe, f, a);
    std::vector<uint8_t> q(x.size());
    quantize_for_step(state, recipe, x, f, q);
    const float scale_inv = state.scale_inv(recipe);
    std::vector<float> back(x.size());
    dequantize_fp8(q, f, scale_inv, back);
    results.push_back({magnitude, a, scale_inv, compare(x, back, f, state.scale)});
    state.record_amax(a, recipe, f);
  }
  return results;
}

RunSummary summarize(const std::vector<StepResult>& results) {
  RunSummary s;
  for (const StepResult& r : results) {
    s.mean_relative += r.error.relative, s.worst_relative = std::max(s.worst_relative, r.error.relative);
    s.max_saturated_pct = std::max(s.max_saturated_pct, r.error.saturated_pct);
    s.mean_flushed_pct += r.error.flushed_pct;
    s.saturated_steps += r.error.saturated_pct > 0;
  }
  const auto steps = static_cast<double>(results.size());
  s.mean_relative /= steps, s.mean_flushed_pct /= steps;
  return s;
}

namespace {

// One step of the lab's DelayedScalingSimulator: the current amax enters the history *before* the scale
// is taken, scale = max(history) / 448, values rounded on lab_model's grid. Returns the mean |error|.
double lab_simulator_error(const std::vector<float>& x, std::vector<float>& history, size_t length) {
  history.push_back(amax(x));
  if (history.size() > length) history.erase(history.begin());
  const float scale = std::max(*std::max_element(history.begin(), history.end()) / 448.0f, 1e-10f);
  double err = 0;
  for (float v : x) err += std::fabs(static_cast<double>(lab_model(v / scale, Fp8Format::E4M3) * scale) - v);
  return err / static_cast<double>(x.size());
}

}  // namespace

std::vector<LabStep> lab_part4(uint64_t seed) {
  const Scenario lab = delayed_scenarios().front();
  constexpr size_t length = 8;
  const auto proper = simulate(lab, {.amax_history_length = length}, 16, seed);
  Normal normal(seed);  // the same tensors simulate() drew
  std::vector<float> history;
  std::vector<LabStep> steps;
  for (const StepResult& r : proper) {
    steps.push_back({r, lab_simulator_error(normal_tensor(normal, 1000, r.magnitude), history, length)});
  }
  return steps;
}

}  // namespace fp8kit::lab
