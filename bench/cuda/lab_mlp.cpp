// The lab's MLP (models/mlp.h: 768 -> 3072 GELU -> 768) on the GPU, bf16 against FP8 (the lab's
// recipe: HYBRID formats, delayed scaling, amax history 16, most_recent): a training step (forward,
// MSE, backward, scaling update, AdamW) and an inference (bf16, or E4M3 weights and activations), each a
// replay of its captured graph; 10 warm-up runs, then 3 rounds of `runs` runs timed with CUDA events,
// the median round. Prints ms per step / per inference, rows/s and the FP8 / bf16 speedup per size.
// Targets (H100): training FP8 no slower than bf16 at 32 rows and >= 1.5x at 16384; inference >= 1.6x
// at 16384.
// Usage: bench_cuda_lab_mlp [runs per round, default 100] [rows..., default 32 16384]
#include "exec/captured_step.h"
#include "run_timing.h"
#include "models/mlp.h"
#include "ops/cuda/context.h"
#include "ops/init.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device_info.h"
#include "runtime/cuda/stream.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <vector>

using namespace fp8kit;

namespace {

Fp8Recipe lab_recipe() {
  Fp8Recipe r;
  r.amax_history_length = 16;
  r.amax_algorithm = AmaxAlgorithm::MostRecent;
  return r;
}

}  // namespace

int main(int argc, char** argv) try {
  if (cuda::list_devices().empty()) {
    std::printf("no CUDA GPU\n");
    return 0;
  }
  const int runs = argc > 1 ? std::atoi(argv[1]) : 100;
  std::vector<int64_t> sizes;
  for (int i = 2; i < argc; ++i) sizes.push_back(std::atoll(argv[i]));
  if (sizes.empty()) sizes = {32, 16384};
  const models::MlpConfig config;
  for (int64_t rows : sizes) {
    double train[2], infer[2];
    float loss[2];
    for (int k = 0; k < 2; ++k) {
      const nn::Precision precision = k == 0 ? nn::Precision::Bf16 : nn::Precision::Fp8;
      models::Mlp model(config, 1, Device::Cuda);
      model.set_precision(precision, lab_recipe());
      ops::Context& c = model.context();
      Tensor x({rows, config.input}, DType::F32, Device::Cuda), y({rows, config.output}, DType::F32, Device::Cuda);
      ops::fill_normal(c, x, 1.0f, 2);
      ops::fill_normal(c, y, 1.0f, 3);
      exec::CapturedStep step([&](ops::Context&) { model.train_step(x, y); });
      train[k] = bench::time_runs(c, runs, [&] { step.run(c); });
      loss[k] = model.loss().to(Device::Cpu).data<float>()[0];

      Tensor xb({rows, config.input}, DType::Bf16, Device::Cuda), out;
      ops::fill_normal(c, xb, 1.0f, 4);
      model.prepare_inference(xb);
      exec::CapturedStep forward([&](ops::Context&) { model.infer(xb, out); });
      infer[k] = bench::time_runs(c, runs, [&] { forward.run(c); });
    }
    const double r = static_cast<double>(rows);
    std::printf("lab_mlp %6lld rows train: bf16 %.4f ms/step, fp8 %.4f ms/step, fp8/bf16 speedup %.3fx "
                "(loss bf16 %.5f, fp8 %.5f)\n",
                static_cast<long long>(rows), train[0] * 1e3, train[1] * 1e3, train[0] / train[1], loss[0], loss[1]);
    std::printf("lab_mlp %6lld rows infer: bf16 %.4f ms (%.0f rows/s), fp8 %.4f ms (%.0f rows/s), fp8/bf16 "
                "speedup %.3fx\n",
                static_cast<long long>(rows), infer[0] * 1e3, r / infer[0], infer[1] * 1e3, r / infer[1],
                infer[0] / infer[1]);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
