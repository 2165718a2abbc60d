// `fp8kit lab`: lab 3.2.3 ("FP8 Training and Inference", ../shared/seeds/003_*) run for real on this
// machine's hardware. Each part appends its sections to one self-contained HTML page and writes its
// CSV files beside it; the command (cli/lab.cpp) runs them in order.
#pragma once

#include "report/html.h"
#include "runtime/device.h"

#include <cstdint>
#include <filesystem>
#include <vector>

namespace fp8kit::lab {

struct LabOptions {
  Device device = Device::Cpu;      // the GPU when there is one
  std::filesystem::path out{};      // directory: index.html and the CSV files
  // Part 2 and 3 row counts: the lab's batch 32 and sizes where FP8 pays off (the CPU gets smaller ones).
  std::vector<int64_t> train_batches{};
  std::vector<int64_t> infer_batches{};
  int warmup_steps = 10, timed_steps = 100;  // the lab's
  uint64_t seed = 42;
};

// Part 1: the formats table and precision by magnitude.
void formats_part(report::HtmlPage& page, const LabOptions& options);
// Part 2: the lab's MLP (768 -> 3072 -> GELU -> 768) trained in bf16 and in FP8 (E4M3 forward, E5M2
// backward, amax history 16, most_recent), AdamW lr 1e-4, MSE on random data: time and loss per batch size.
void training_part(report::HtmlPage& page, const LabOptions& options);
// Part 3: the same MLP's inference with real E4M3 weights and activations against bf16: error, latency
// and throughput.
void inference_part(report::HtmlPage& page, const LabOptions& options);
// Part 4 and exercise 1: delayed scaling with amax histories of 4, 8, 16 and 32 steps.
void delayed_scaling_part(report::HtmlPage& page, const LabOptions& options);
// Exercise 2: E4M3 against E5M2 on gradient-like tensors.
void gradient_formats_part(report::HtmlPage& page, const LabOptions& options);
// The lab's simulated FP8 (round(x * 2^m) / 2^m) next to real FP8 rounding.
void simulated_fp8_part(report::HtmlPage& page, const LabOptions& options);
// The lab's "Common Mistakes" (wrong format, unscaled gradients, casts without autocast's scales), each
// measured: the wrong way against the right one on the same tensors.
void common_mistakes_part(report::HtmlPage& page, const LabOptions& options);

}  // namespace fp8kit::lab
