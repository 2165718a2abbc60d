// Times one epoch of the seed experiment's training on the GPU (625 steps of batch 32, random tokens
// and labels, SeedClassifierCuda with its CUDA graph) per precision: CUDA events around the 625
// replays; the precisions take turns epoch by epoch, 1 warm-up round and 5 timed ones. Prints the
// median and best seconds per epoch, and the last loss.
// Usage: bench_cuda_seed_epoch [steps per epoch, default 625] [precision prefix, e.g. "fp8", default all]
#include "models/seed_classifier_cuda.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/device_info.h"
#include "runtime/cuda/stream.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <memory>
#include <random>
#include <string>
#include <vector>

using namespace fp8kit;

namespace {

struct Run {
  const char* name;
  nn::Precision precision;
  Fp8Recipe recipe;
};

}  // namespace

int main(int argc, char** argv) {
  try {
    if (cuda::list_devices().empty()) {
      std::fprintf(stderr, "error: no CUDA GPU\n");
      return 1;
    }
    const int steps = argc > 1 ? std::atoi(argv[1]) : 625;
    const std::string only = argc > 2 ? argv[2] : "";
    if (steps <= 0) {
      std::fprintf(stderr, "error: steps per epoch must be positive\n");
      return 2;
    }
    constexpr int kBatch = 32;
    const models::SeedClassifierConfig config;
    std::mt19937 rng(1);
    std::vector<int32_t> tokens(static_cast<size_t>(steps) * kBatch * config.sequence_length);
    std::vector<float> labels(static_cast<size_t>(steps) * kBatch);
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % config.vocabulary_size);
    for (float& l : labels) l = static_cast<float>(rng() % 2);
    cuda::DeviceBuffer<int32_t> d_tokens(tokens.size());
    cuda::DeviceBuffer<float> d_labels(labels.size());
    d_tokens.upload(tokens);
    d_labels.upload(labels);

    Fp8Recipe keras;
    keras.lag = ScalingLag::Keras;
    const Run runs[] = {{"fp32", nn::Precision::Fp32, {}},
                        {"bf16", nn::Precision::Bf16, {}},
                        {"fp8 (te lag)", nn::Precision::Fp8, {}},
                        {"fp8 (keras lag)", nn::Precision::Fp8, keras}};
    // The precisions take turns, one epoch each per round (1 warm-up round, kRounds timed), so that a
    // drift of the machine's speed during the run falls on all of them alike.
    constexpr int kRounds = 5;
    struct Model {
      const Run* run;
      models::SeedClassifier cpu;
      std::unique_ptr<models::SeedClassifierCuda> gpu;
      std::vector<float> seconds;
    };
    std::vector<Model> entries;
    for (const Run& run : runs) {
      if (std::string(run.name).rfind(only, 0) != 0) continue;
      Model& m = entries.emplace_back(Model{&run, models::SeedClassifier(config, 42), nullptr, {}});
      m.cpu.set_precision(run.precision, run.recipe);
      m.gpu = std::make_unique<models::SeedClassifierCuda>(m.cpu, 42, kBatch);
    }
    const cuda::Event start(true), stop(true);
    for (int round = 0; round <= kRounds; ++round) {
      for (Model& m : entries) {
        FP8KIT_CUDA_CHECK(cudaDeviceSynchronize());
        FP8KIT_CUDA_CHECK(cudaEventRecord(start.get(), nullptr));
        for (int s = 0; s < steps; ++s)
          m.gpu->enqueue_train_step(d_tokens.data() + static_cast<size_t>(s) * kBatch * config.sequence_length,
                                    d_labels.data() + static_cast<size_t>(s) * kBatch);
        m.gpu->loss();  // waits for the stream
        FP8KIT_CUDA_CHECK(cudaEventRecord(stop.get(), nullptr));
        if (round > 0) m.seconds.push_back(cuda::elapsed_ms(start, stop) / 1000.0f);
      }
    }
    std::printf("%-16s %12s %12s %12s %12s\n", "precision", "s/epoch", "best", "us/step", "last loss");
    for (Model& m : entries) {
      std::sort(m.seconds.begin(), m.seconds.end());
      const float median = m.seconds[m.seconds.size() / 2];
      std::printf("%-16s %12.4f %12.4f %12.1f %12.5f\n", m.run->name, median, m.seconds.front(), 1e6 * median / steps,
                  m.gpu->loss());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
