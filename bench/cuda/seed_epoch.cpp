// Times one epoch of the seed experiment's training on the GPU (625 steps of batch 32, random tokens
// and labels: the seed model on the GPU, each step a replay of its captured graph, as the trainer
// runs it) per precision: CUDA events around the 625 steps; the precisions take turns epoch by epoch, 1 warm-up round and 5 timed ones. Prints the
// median and best seconds per epoch, and the last loss.
// Usage: bench_cuda_seed_epoch [steps per epoch, default 625] [precision prefix, e.g. "fp8", default all]
#include "exec/captured_step.h"
#include "models/seed_classifier.h"
#include "ops/cuda/context.h"
#include "optim/adam.h"
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
    // A model on the GPU, its optimizer, the batch tensors its captured step reads, and the step.
    struct Model {
      const Run* run;
      std::unique_ptr<models::SeedClassifier> model;
      std::unique_ptr<optim::Adam> adam;
      Tensor tokens, labels;
      std::unique_ptr<exec::CapturedStep> step;
      std::vector<float> seconds;

      float loss() {
        model->context().synchronize();
        return model->loss().to(Device::Cpu).data<float>()[0];
      }
    };
    std::vector<std::unique_ptr<Model>> entries;
    for (const Run& run : runs) {
      if (std::string(run.name).rfind(only, 0) != 0) continue;
      auto m = std::make_unique<Model>();
      m->run = &run;
      m->model = std::make_unique<models::SeedClassifier>(config, 42, Device::Cuda);
      m->model->set_precision(run.precision, run.recipe);
      m->adam = std::make_unique<optim::Adam>(m->model->parameter_set());
      m->tokens = Tensor({kBatch, config.sequence_length}, DType::I32, Device::Cuda);
      m->labels = Tensor({kBatch}, DType::F32, Device::Cuda);
      Model* raw = m.get();
      m->step = std::make_unique<exec::CapturedStep>([raw](ops::Context& c) {
        raw->model->forward_backward(raw->tokens, raw->labels);
        raw->adam->step(c, /*advance_step=*/true);
      });
      entries.push_back(std::move(m));
    }
    const cuda::Event start(true), stop(true);
    for (int round = 0; round <= kRounds; ++round) {
      for (auto& m : entries) {
        ops::Context& c = m->model->context();
        const cudaStream_t stream = ops::stream(c, ops::Lane::Main);
        FP8KIT_CUDA_CHECK(cudaDeviceSynchronize());
        FP8KIT_CUDA_CHECK(cudaEventRecord(start.get(), stream));
        for (int s = 0; s < steps; ++s) {
          FP8KIT_CUDA_CHECK(cudaMemcpyAsync(m->tokens.device_data<int32_t>(),
                                            d_tokens.data() + static_cast<size_t>(s) * kBatch * config.sequence_length,
                                            m->tokens.nbytes(), cudaMemcpyDeviceToDevice, stream));
          FP8KIT_CUDA_CHECK(cudaMemcpyAsync(m->labels.device_data<float>(),
                                            d_labels.data() + static_cast<size_t>(s) * kBatch, m->labels.nbytes(),
                                            cudaMemcpyDeviceToDevice, stream));
          m->step->run(c);
        }
        FP8KIT_CUDA_CHECK(cudaEventRecord(stop.get(), stream));
        if (round > 0) m->seconds.push_back(cuda::elapsed_ms(start, stop) / 1000.0f);
      }
    }
    std::printf("%-16s %12s %12s %12s %12s\n", "precision", "s/epoch", "best", "us/step", "last loss");
    for (auto& m : entries) {
      std::sort(m->seconds.begin(), m->seconds.end());
      const float median = m->seconds[m->seconds.size() / 2];
      std::printf("%-16s %12.4f %12.4f %12.1f %12.5f\n", m->run->name, median, m->seconds.front(),
                  1e6 * median / steps, m->loss());
    }
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
