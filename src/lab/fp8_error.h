// The measurements behind lab 3.2.3's numbers, with the real FP8 casts of numerics/: quantization error
// of sample tensors, relative error against magnitude (real FP8 and the lab's simulate_fp8), and delayed
// scaling over steps. Shared by `fp8kit quant-error` (tables on stdout) and `fp8kit lab` (the page).
#pragma once

#include "numerics/format.h"
#include "numerics/recipe.h"

#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace fp8kit::lab {

inline constexpr Fp8Format kFormats[] = {Fp8Format::E4M3, Fp8Format::E5M2};

// Standard normal samples from mt19937_64 by Box-Muller: the same numbers on every platform
// (std::normal_distribution is implementation-defined).
class Normal {
 public:
  explicit Normal(uint64_t seed) : rng_(seed) {}
  float operator()();
  double uniform();  // in (0, 1)

 private:
  std::mt19937_64 rng_;
};

std::vector<float> normal_tensor(Normal& normal, size_t n, float sigma);

// Error of quantizing a tensor x with `scale` (TE convention: fp8(x * scale)) and dequantizing.
struct ErrorStats {
  double mean_abs = 0, max_abs = 0;
  double relative = 0;          // mean |error| / mean |x|
  double element_relative = 0;  // mean over nonzero x of |error| / |x| (a flushed value counts 1)
  double snr_db = 0, flushed_pct = 0, saturated_pct = 0;
};

// x against its dequantized FP8 version `back`, quantized with `scale`.
ErrorStats compare(const std::vector<float>& x, const std::vector<float>& back, Fp8Format format, float scale);
ErrorStats quantization_error(const std::vector<float>& x, Fp8Format format, float scale);

// --- Sample tensors: weights, activations with outliers, small gradients, the lab's exercise 2 tensor.
struct SampleTensor {
  std::string name;
  std::vector<float> values;
};
std::vector<SampleTensor> sample_tensors(uint64_t seed);

// --- Relative error against magnitude.

// The lab's simulate_fp8: clip to +-fp8_max, then round to a *fixed* grid of 2^-mantissa_bits. Real FP8
// steps scale with the exponent, so this model is only right in [1, 2).
float lab_model(float v, Fp8Format format);

// |fp8(v) - v| / v and |lab_model(v) - v| / v at `points` magnitudes 10^(first_decade + k * decades /
// (points - 1)), scale 1. Index 0 is E4M3, 1 is E5M2 (as kFormats).
struct MagnitudeSweep {
  std::vector<double> magnitude;
  std::vector<double> real[2], lab[2];
};
MagnitudeSweep magnitude_sweep(float first_decade, float decades, int points);
// The worst error in each bin of `per_bin` points: point by point the error is a dense sawtooth, its
// envelope is the precision a format guarantees at that magnitude. x is each bin's geometric middle.
void worst_per_bin(const MagnitudeSweep& sweep, const std::vector<double>& error, int per_bin, std::vector<double>& x,
                   std::vector<double>& y);

// --- Delayed scaling: E4M3 tensors of 1000 normal values (as the lab's) whose std changes by step.
struct Scenario {
  std::string id, title;
  std::function<float(int step)> magnitude;  // the std of step t's tensor
};
// linear_growth (the lab's Part 4), fast_growth, spike, decay.
std::vector<Scenario> delayed_scenarios();

struct Method {
  std::string label;
  Fp8Recipe recipe;
};
// Delayed scaling with histories 4, 8, 16, 32 (max), most_recent, Keras's lag, and current scaling.
std::vector<Method> scaling_methods();

struct StepResult {
  float magnitude, amax, scale_inv;
  ErrorStats error;
};
// Runs the recipe over `steps` tensors (the same tensors for every recipe with the same seed).
std::vector<StepResult> simulate(const Scenario& scenario, const Fp8Recipe& recipe, int steps, uint64_t seed);

// A run's steps in a line: relative error (mean |x - dq(q(x))| / mean |x|) averaged and at its worst,
// steps with saturated values, the most saturated and the mean flushed percentage.
struct RunSummary {
  double mean_relative = 0, worst_relative = 0, max_saturated_pct = 0, mean_flushed_pct = 0;
  int saturated_steps = 0;
};
RunSummary summarize(const std::vector<StepResult>& results);

// The lab's Part 4 done properly (16 steps, std 0.1 + 0.1 t, history 8, E4M3, TE's one-step lag, real
// casts), each step beside the mean |error| the lab's DelayedScalingSimulator reports for the same tensor
// (current amax in the history before scaling, so no delay, and values on the fixed grid of lab_model).
struct LabStep {
  StepResult proper;
  double lab_error;
};
std::vector<LabStep> lab_part4(uint64_t seed);

}  // namespace fp8kit::lab
