// The training loop of the seed classifier on tokenized data held in memory: a seeded shuffle per
// epoch, Adam, a Keras-like progress bar, validation after each epoch, an atomic checkpoint per
// epoch, and resumption that reproduces an uninterrupted run bit for bit.
#pragma once

#include "models/seed_classifier.h"
#include "nn/precision.h"
#include "numerics/recipe.h"
#include "optim/adam.h"
#include "runtime/device.h"
#include "train/metrics_log.h"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace fp8kit::train {

// Tokenized, labelled examples.
struct TokenDataset {
  std::vector<int32_t> tokens;  // [size, sequence_length], row-major
  std::vector<float> labels;    // [size], 0 or 1
  int64_t sequence_length = 0;

  int64_t size() const { return static_cast<int64_t>(labels.size()); }
};

struct Evaluation {
  double loss = 0;      // mean clipped binary cross-entropy
  double accuracy = 0;  // fraction with (probability > 0.5) == label
};

// Evaluates without dropout and with frozen FP8 scales, in batches of batch_size, on the model's device.
Evaluation evaluate(models::SeedClassifier& model, const TokenDataset& data, int batch_size);

struct TrainOptions {
  models::SeedClassifierConfig model;
  nn::Precision precision = nn::Precision::Bf16;
  Fp8Recipe recipe;  // used when precision is Fp8
  int epochs = 3;
  int batch_size = 32;
  // Keys the initial weights, the dropout masks (per step) and the data order (per epoch), so runs
  // of different precisions with the same seed see the same batches in the same order.
  uint64_t seed = 0;
  optim::AdamOptions adam;
  // Receives checkpoint-<precision>.safetensors, rewritten after each epoch. Empty: no checkpoints
  // (and no resume).
  std::filesystem::path out;
  MetricsLog* metrics = nullptr;  // receives one event per epoch and one for the test evaluation
  bool resume = false;       // continue from out's checkpoint for this precision, if there is one
  bool inspect_fp8 = false;  // print the query layer's FP8 state before and after training
  // FP8 health statistics (train/health.h) every this many steps and at the last (0: none), for an FP8 precision with
  // per-tensor scales and a metrics log: each epoch's "health" events go to the log with its line.
  int64_t health_every = 100;
  std::FILE* console = stdout;  // progress and reports; nullptr: silent
  // Where the model lives and its steps and evaluations run (checkpoints are the same files either
  // way). A GPU step is captured once per batch size as a CUDA graph and replayed.
  Device device = Device::Cpu;
  // Test hook, called before each training step with the model and the 0-based global step.
  std::function<void(models::SeedClassifier&, int64_t step)> before_step;
};

struct EpochSummary {
  int epoch = 0;  // 1-based
  double loss = 0, accuracy = 0;  // training, averaged over the epoch's examples
  std::optional<Evaluation> validation;
  double seconds = 0;  // training steps only
};

struct TrainResult {
  models::SeedClassifier model;
  std::vector<EpochSummary> epochs;  // the epochs this call ran (after a resume, the remaining ones)
  std::optional<Evaluation> test;  // none when a resumed run had finished and logged its test result
  std::optional<std::filesystem::path> checkpoint;  // the last one written or resumed from
};

// Where train() keeps the checkpoint of a run of `precision` in `out`.
std::filesystem::path checkpoint_path(const std::filesystem::path& out, nn::Precision precision);

// Trains on `train_data`; validates on `validation` after each epoch and evaluates `test` at the end
// when given. A non-finite loss or weight stops training with an error naming the epoch, the step
// and the last good checkpoint, which is left intact.
TrainResult train(const TrainOptions& options, const TokenDataset& train_data, const TokenDataset* validation,
                  const TokenDataset* test);

}  // namespace fp8kit::train
