// Training throughput of the Llama LM on the GPU: an optimizer step (forward, backward, clipping,
// AdamW) on random tokens, each step a replay of its captured graph as the trainer runs it, bf16 and
// FP8 (delayed scaling, te lag) in turns: 2 warm-up steps, then rounds of `steps` steps timed with
// CUDA events; medians of 3 rounds. Prints tokens/s, model-FLOPs utilisation (PaLM's count, against
// the H100 SXM's 989 TFLOP/s dense bf16) and the FP8 / bf16 ratio. For FP8 also the cost of the
// health statistics (train/health.h) as the trainer pays it: a recording step (its own captured graph,
// the records read back and made into the metrics event) against a plain one, each synchronized as
// the trainer's steps are (medians of 3 rounds), as a share of the plain steps of one interval.
// Also the GPU memory in use after the first steps (cudaMemGetInfo: the model, its optimizer state,
// every buffer of a step, the libraries' workspaces), for the memory options (models/llama.h).
// Usage: bench_cuda_lm_step [preset, default gpt2-small] [batch, default 16] [seq, default 1024]
//        [steps per round, default 10] [vocab, default 8192] [precision: bf16, fp8, fp8-block (block
//        scaling: 1 x 128 activations and gradients, 128 x 128 weights), fp8-attention (fp8 with the
//        attention's forward in FP8 too: ops::SdpaShape::fp8) or both (default: bf16 and fp8)]
//        [health interval in steps, default 50; 0: not measured]
//        [memory: chunked (default: the loss in chunks), whole (one pass) or recompute (chunks too)]
#include "exec/captured_step.h"
#include "models/llama.h"
#include "ops/cuda/context.h"
#include "ops/grad_norm.h"
#include "optim/adam.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device_info.h"
#include "runtime/cuda/stream.h"
#include "train/health.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <random>
#include <string>
#include <vector>

using namespace fp8kit;

int main(int argc, char** argv) try {
  if (cuda::list_devices().empty()) {
    std::printf("no CUDA GPU\n");
    return 0;
  }
  const std::string preset = argc > 1 ? argv[1] : "gpt2-small";
  const int64_t B = argc > 2 ? std::atoll(argv[2]) : 16, T = argc > 3 ? std::atoll(argv[3]) : 1024;
  const int steps = argc > 4 ? std::atoi(argv[4]) : 10;
  const int64_t vocab = argc > 5 ? std::atoll(argv[5]) : 8192;
  const models::LlamaConfig config = models::llama_preset(preset, vocab);
  constexpr double kPeak = 989e12;
  const double flops_per_step = models::flops_per_token(config, T) * static_cast<double>(B * T);
  std::printf("lm_step %s: %lld parameters, batch %lld x seq %lld = %lld tokens per step\n", preset.c_str(),
              static_cast<long long>(models::parameter_count(config)), static_cast<long long>(B),
              static_cast<long long>(T), static_cast<long long>(B * T));
  struct Run {
    nn::Precision precision = nn::Precision::Bf16;
    Fp8Recipe recipe{};
    std::string label;
    bool fp8_attention = false;
    std::vector<double> seconds;
    double loss = 0, used_gib = 0;
  };
  std::vector<Run> runs;
  const std::string which = argc > 6 ? argv[6] : "both";
  const auto add = [&](nn::Precision precision, const Fp8Recipe& recipe, std::string label, bool fp8_attention) {
    Run run;
    run.precision = precision, run.recipe = recipe, run.label = std::move(label), run.fp8_attention = fp8_attention;
    runs.push_back(std::move(run));
  };
  if (which == "fp8-block") {
    add(nn::Precision::Fp8, {.mode = ScalingMode::Block}, "fp8 block", false);
  } else if (which == "fp8-attention") {
    add(nn::Precision::Fp8, {}, "fp8 + fp8 attention", true);
  } else {
    for (nn::Precision p : {nn::Precision::Bf16, nn::Precision::Fp8})
      if (which == "both" || nn::parse_precision(which) == p) add(p, {}, std::string(nn::name(p)), false);
  }
  const int64_t health_every = argc > 7 ? std::atoll(argv[7]) : 50;
  const std::string memory = argc > 8 ? argv[8] : "chunked";
  if (memory != "chunked" && memory != "whole" && memory != "recompute") {
    std::fprintf(stderr, "error: memory must be chunked, whole or recompute, not %s\n", memory.c_str());
    return 1;
  }
  const models::LlamaMemoryOptions memory_options{.loss_chunk_rows = memory == "whole" ? B * T : 0,
                                                  .recompute = memory == "recompute"};
  std::mt19937 rng(1);
  std::vector<int32_t> ids(B * T);
  for (auto& v : ids) v = static_cast<int32_t>(rng() % vocab);
  for (Run& run : runs) {
    models::Llama model(config, 1, Device::Cuda);
    model.set_precision(run.precision, run.recipe);
    model.set_fp8_attention(run.fp8_attention);
    model.set_memory_options(memory_options);
    optim::Adam adam(model.parameter_set(), {.learning_rate = 3e-4f, .beta1 = 0.9f, .beta2 = 0.95f,
                                             .epsilon = 1e-8f, .weight_decay = 0.1f, .warmup_steps = 10});
    Tensor tokens({B, T}, DType::I32, Device::Cuda), targets({B * T}, DType::I32, Device::Cuda), losses, norm;
    tokens.copy_from_host(ids.data());
    targets.copy_from_host(ids.data());
    auto queue = [&](ops::Context& c, bool record) {
      if (model.scaling() != nullptr) model.scaling()->set_recording(record);
      model.forward(tokens, true);
      model.backward(targets, 1.0f / static_cast<float>(B * T), losses);
      ops::clip_by_global_norm(c, model.parameter_set().grads(), 1.0f, norm);
      adam.step(c);
      if (model.scaling() != nullptr) model.scaling()->set_recording(false);
    };
    exec::CapturedStep step([&](ops::Context& c) { queue(c, false); });
    ops::Context& c = model.context();
    for (int s = 0; s < 2; ++s) step.run(c);
    c.synchronize();
    size_t free_bytes = 0, total_bytes = 0;
    FP8KIT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    run.used_gib = static_cast<double>(total_bytes - free_bytes) / (1 << 30);
    const cuda::Event begin(true), end(true);
    for (int round = 0; round < 3; ++round) {
      FP8KIT_CUDA_CHECK(cudaEventRecord(begin.get(), ops::stream(c)));
      for (int s = 0; s < steps; ++s) step.run(c);
      FP8KIT_CUDA_CHECK(cudaEventRecord(end.get(), ops::stream(c)));
      c.synchronize();
      run.seconds.push_back(cuda::elapsed_ms(begin, end) / 1e3 / steps);
    }
    if (run.precision == nn::Precision::Fp8 && health_every > 0 && model.scaling() != nullptr &&
        model.scaling()->size() > 0) {
      // Host-timed, synchronized steps: plain ones, and recording ones with their read-back and event.
      exec::CapturedStep recording([&](ops::Context& context) { queue(context, true); });
      for (int s = 0; s < 2; ++s) recording.run(c);
      c.synchronize();
      auto median_ms = [&](bool record) {
        std::vector<double> rounds;
        for (int round = 0; round < 3; ++round) {
          const auto start = std::chrono::steady_clock::now();
          for (int s = 0; s < steps; ++s) {
            (record ? recording : step).run(c);
            if (record) {
              const nlohmann::json event = train::health_event(*model.scaling(), model.scaling()->read_records(c));
              if (event.empty()) std::printf("empty health event\n");
            } else {
              c.synchronize();
            }
          }
          rounds.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count() /
                           steps);
        }
        std::sort(rounds.begin(), rounds.end());
        return rounds[1];
      };
      const double plain = median_ms(false), recorded = median_ms(true);
      std::printf("lm_step %s fp8 health: plain step %.3f ms, recording step %.3f ms (%d tensors): +%.3f ms, "
                  "%.2f%% of a step averaged over %lld steps\n",
                  preset.c_str(), plain, recorded, model.scaling()->size(), recorded - plain,
                  100.0 * (recorded - plain) / (plain * static_cast<double>(health_every)),
                  static_cast<long long>(health_every));
    }
    const Tensor l = losses.to(Device::Cpu);
    double sum = 0;
    for (float v : l.span<float>()) sum += v;
    run.loss = sum / static_cast<double>(l.numel());
  }
  for (Run& run : runs) {
    std::sort(run.seconds.begin(), run.seconds.end());
    const double s = run.seconds[1];
    std::printf("lm_step %s %s (%s): %.1f ms/step, %.0f tokens/s, MFU %.1f%%, loss %.4f, GPU memory in use %.2f GiB\n",
                preset.c_str(), run.label.c_str(), memory.c_str(), s * 1e3,
                static_cast<double>(B * T) / s, 100.0 * flops_per_step / s / kPeak, run.loss, run.used_gib);
  }
  if (runs.size() == 2)
    std::printf("lm_step %s fp8 / bf16 tokens/s: %.3f\n", preset.c_str(), runs[0].seconds[1] / runs[1].seconds[1]);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
