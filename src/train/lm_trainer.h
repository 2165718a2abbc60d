// The training loop of the Llama language model on token streams: windows of seq + 1 tokens in a
// seeded order, gradient accumulation, clipping by global norm, AdamW with warmup and cosine decay,
// progress with tokens/s and model-FLOPs utilisation, validation loss and perplexity, an atomic
// checkpoint that resumes the run exactly, and the model saved as a Hugging Face directory; alone or
// as one rank of a data-parallel job (dist::Communicator).
#pragma once

#include "data/token_windows.h"
#include "models/llama.h"
#include "nn/linear_recipe.h"
#include "nn/precision.h"
#include "numerics/recipe.h"
#include "optim/adam.h"
#include "runtime/device.h"
#include "train/metrics_log.h"

#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <span>

namespace fp8kit::dist {
class Communicator;
}

namespace fp8kit::train {

struct LmTrainOptions {
  models::LlamaConfig model;
  nn::Precision precision = nn::Precision::Bf16;
  Fp8Recipe recipe;  // used by FP8 Linears: all of them when precision is Fp8, or those `linears` makes FP8
  nn::LinearRecipes linears;  // per-Linear overrides of `precision` (models::Llama::set_precision)
  bool fp8_attention = false;  // the attention's forward in FP8 (models::Llama::set_fp8_attention)
  int64_t seq = 256;
  int64_t batch = 16;        // sequences per micro-batch, of the whole job (every rank takes its slice)
  int64_t accumulation = 1;  // micro-batches per optimizer step
  // The LM head and loss in chunks of rows, activation recomputation (models/llama.h).
  models::LlamaMemoryOptions memory;
  int64_t steps = 1000;      // optimizer steps
  // AdamW; its schedule's decay_steps 0 means `steps`. Weight decay applies to every parameter.
  optim::AdamOptions adam{.learning_rate = 6e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .epsilon = 1e-8f,
                          .weight_decay = 0.1f, .warmup_steps = 100};
  float clip = 1.0f;  // max global gradient norm; 0: no clipping
  // Keys the initial weights and the data order.
  uint64_t seed = 0;
  int64_t eval_every = 0;      // validation every this many steps (0: at the end only)
  int64_t eval_batches = 20;   // validation micro-batches (0: the whole validation stream)
  int64_t checkpoint_every = 0;  // steps between checkpoints (0: at the end only)
  // Receives checkpoint-<precision>.safetensors (the whole training state) and, at the end,
  // model-<precision>/ (an HF model directory). Empty: neither (in a job: empty on every rank or on none).
  std::filesystem::path out;
  bool resume = false;
  Device device = Device::Cpu;
  // The device's dense bf16 peak for model-FLOPs utilisation (the H100 SXM's 989 TFLOP/s); 0: none.
  double peak_flops = 0;
  MetricsLog* metrics = nullptr;
  // FP8 health statistics (train/health.h) every this many steps and at the last (0: none), written to `metrics` as
  // "health" events; needs an FP8 precision with per-tensor scales (delayed or current). A recording
  // step is its own captured graph, so the other steps run exactly as without it.
  int64_t health_every = 50;
  std::FILE* console = stdout;
  // A data-parallel job's collectives (null: this process alone), on the model's device. Every rank
  // trains on its own contiguous slice of batch / world size sequences of every micro-batch (the world
  // size must divide batch), so that the windows of a step, the learning-rate schedule and the update
  // are those of one process: gradients are summed across ranks (each rank's loss scaled by 1 / the
  // step's tokens of the whole job), in buckets of about bucket_bytes of the flat gradient buffer, each
  // as soon as the backward has finished its gradients; FP8 amaxes are max-reduced before every scale
  // update, so every rank keeps the same scales. Rank 0 alone writes metrics, console output and
  // checkpoints, and resumes: it reads the checkpoint and broadcasts it, so a checkpoint resumes on
  // any number of ranks. Health statistics are rank 0's slice's.
  dist::Communicator* comm = nullptr;
  int64_t bucket_bytes = int64_t{25} << 20;
  // ZeRO-1 (with comm): the gradient buckets are reduce-scattered instead of all-reduced, so that each
  // rank receives the sums of its 1 / world size slice of every bucket alone (half an all-reduce's
  // traffic); its AdamW keeps the moments of, and updates, that shard (the gradients clipped by the
  // whole gradient's norm: the shards' sums of squares all-reduced); then the ranks all-gather the
  // parameters. The last few elements of flat buffers that the world size does not divide are
  // all-reduced and rank 0's to update. Checkpoints gather the shards: the same files as without it,
  // which resume with or without it, on any number of ranks.
  bool zero1 = false;
};

struct LmEvaluation {
  double loss = 0;  // mean next-token cross-entropy (nats)
  double perplexity = 0;
  int64_t tokens = 0;
};

// The mean loss over up to max_batches micro-batches of `batch` windows of `windows` in stream order
// (0: all), frozen FP8 scales, the LM head in the model's loss chunks (Llama::evaluate). With `comm`,
// every rank evaluates its slice of each micro-batch (the world size must divide batch) and every rank
// returns the job's mean.
LmEvaluation evaluate_lm(models::Llama& model, const data::TokenWindows& windows, int64_t batch, int64_t max_batches,
                         dist::Communicator* comm = nullptr);

struct LmTrainResult {
  models::Llama model;
  int64_t steps = 0;       // optimizer steps done in all (a resumed run included)
  double final_loss = 0;   // the last logged training loss
  std::optional<LmEvaluation> validation;
  double tokens_per_second = 0;
  double mfu = 0;  // model FLOPs utilisation against options.peak_flops (0 without one)
};

// Checks that `batch` sequences split evenly over a job's `processes` (each trains batch / processes).
void check_batch_split(int64_t batch, int64_t processes);

// Trains on `train_stream` and validates on `validation_stream` (token ids < model.vocab_size).
LmTrainResult train_lm(const LmTrainOptions& options, std::span<const int32_t> train_stream,
                       std::span<const int32_t> validation_stream);

}  // namespace fp8kit::train
