// One GPT layer (models/gpt_layer.h: Transformer Engine's TransformerLayer, pre-LN, GELU, causal
// self-attention) on the GPU, timed as TE's getting-started guide times its TransformerLayer: forward +
// backward of the layer (hidden 4096, 32 heads, sequence 2048, batch 8, FFN 16384), bf16 and FP8
// (delayed scaling, te lag, amax history 16 and max, as the guide's DelayedScaling; the scaling update
// included). Each iteration a replay of its captured graph: 3 warm-up iterations, then 3 rounds of
// `runs` iterations timed with CUDA events, the median round; the training forward alone the same way
// (unless left out: for a profile of the steps alone).
// Prints ms per iteration, TFLOP/s (models::gpt_layer_flops: the GEMMs and the causal half of
// attention), the FP8 / bf16 speedup, and how far FP8's results are from bf16's (relative L2 of what
// the layer adds: y - x and dx - dy).
// Targets (issue 11, the H100): FP8 at most 20 ms, bf16 at most 31 ms (TE's docs: 21.67 ms for its FP8
// TransformerLayer; PyTorch 2.11 eager bf16 with SDPA 33.1 ms).
// Usage: bench_cuda_gpt_layer [runs per round, default 10] [hidden, 4096] [heads, 32] [seq, 2048]
//        [batch, 8] [ffn, 16384] [precision: bf16, fp8 or both (default)] [time the forward alone: 1
//        (default) or 0]
#include "base/error.h"
#include "exec/captured_step.h"
#include "run_timing.h"
#include "models/gpt_layer.h"
#include "ops/cuda/context.h"
#include "ops/init.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device_info.h"
#include "runtime/cuda/stream.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <string>
#include <vector>

using namespace fp8kit;

namespace {

std::vector<float> host(const Tensor& t) {
  const Tensor h = t.to(Device::Cpu);
  return {h.data<float>(), h.data<float>() + h.numel()};
}

// The relative L2 distance of a - base from b - base.
double relative(const std::vector<float>& a, const std::vector<float>& b, const std::vector<float>& base) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - b[i], e = static_cast<double>(b[i]) - base[i];
    num += d * d;
    den += e * e;
  }
  return std::sqrt(num / std::max(den, 1e-30));
}

}  // namespace

int main(int argc, char** argv) try {
  if (cuda::list_devices().empty()) {
    std::printf("no CUDA GPU\n");
    return 0;
  }
  const int runs = argc > 1 ? std::atoi(argv[1]) : 10;
  models::GptLayerConfig config;
  if (argc > 2) config.hidden = std::atoll(argv[2]);
  if (argc > 3) config.heads = std::atoll(argv[3]);
  const int64_t T = argc > 4 ? std::atoll(argv[4]) : 2048, B = argc > 5 ? std::atoll(argv[5]) : 8;
  if (argc > 6) config.ffn = std::atoll(argv[6]);
  const bool time_forward = argc <= 8 || std::atoi(argv[8]) != 0;
  FP8KIT_CHECK(runs > 0 && T > 0 && B > 0, "bench_cuda_gpt_layer: runs {}, seq {} and batch {} must be positive", runs,
               T, B);
  const int64_t rows = B * T;
  const double flops = models::gpt_layer_flops(config, B, T);
  std::printf("gpt_layer: hidden %lld, %lld heads, seq %lld, batch %lld, ffn %lld: %.1f GFLOP per forward + backward\n",
              static_cast<long long>(config.hidden), static_cast<long long>(config.heads), static_cast<long long>(T),
              static_cast<long long>(B), static_cast<long long>(config.ffn), flops * 1e-9);
  Fp8Recipe recipe;  // TE's DelayedScaling of the guide: HYBRID formats, amax history 16, max
  recipe.amax_history_length = 16;
  struct Run {
    nn::Precision precision;
    double forward = 0, step = 0;
    std::vector<float> y{}, dx{};
  };
  std::vector<Run> all;
  for (nn::Precision p : {nn::Precision::Bf16, nn::Precision::Fp8})
    if (argc <= 7 || std::string(argv[7]) == "both" || nn::parse_precision(argv[7]) == p) all.push_back({p});
  std::vector<float> x_host, dy_host;
  for (Run& run : all) {
    models::GptLayer layer(config, 1, Device::Cuda);
    layer.set_precision(run.precision, recipe);
    ops::Context& c = layer.context();
    Tensor x({rows, config.hidden}, DType::F32, Device::Cuda), dy({rows, config.hidden}, DType::F32, Device::Cuda);
    ops::fill_normal(c, x, 1.0f, 2);
    ops::fill_normal(c, dy, 1.0f, 3);
    const Tensor *y = nullptr, *dx = nullptr;
    if (time_forward) {
      exec::CapturedStep forward([&](ops::Context&) { layer.forward(x, B, T, true); });
      run.forward = bench::time_runs(c, runs, [&] { forward.run(c); }, 3);
    }
    exec::CapturedStep step([&](ops::Context&) {
      y = &layer.forward(x, B, T, true);
      dx = &layer.backward(dy);
    });
    run.step = bench::time_runs(c, runs, [&] { step.run(c); }, 3);
    run.y = host(*y);
    run.dx = host(*dx);
    if (x_host.empty()) {
      x_host = host(x);
      dy_host = host(dy);
    }
    std::printf("gpt_layer %s: forward + backward %.3f ms (%.0f TFLOP/s)", nn::name(run.precision).data(),
                run.step * 1e3, flops / run.step * 1e-12);
    if (time_forward) std::printf(", training forward alone %.3f ms", run.forward * 1e3);
    std::printf("\n");
  }
  if (all.size() == 2) {
    std::printf("gpt_layer fp8 / bf16 speedup of forward + backward: %.3fx (targets: fp8 <= 20 ms, bf16 <= 31 ms)\n",
                all[0].step / all[1].step);
    std::printf("gpt_layer fp8 vs bf16: relative L2 of y - x %.3e, of dx - dy %.3e\n",
                relative(all[1].y, all[0].y, x_host), relative(all[1].dx, all[0].dx, dy_host));
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
