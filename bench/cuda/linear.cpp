// One Linear's forward at the seed model's shapes (x [rows, 32] f32, W [32, 32]): the input made into
// GEMM operands, then the GEMM, three ways: bf16 (cast + transposed copy, cuBLASLt bf16 GEMM), FP8
// apart (quantize_fp8 with transposed codes and amax, cuBLASLt FP8 GEMM with fast accumulation), and
// FP8 fused (quantize_fp8_gemm: the same quantization and tensor-core MMAs in one launch). Time per
// call from CUDA graphs of back-to-back calls (graph_timing.h), as the seed model replays them.
// Run: build/bench/bench_cuda_linear [--benchmark_repetitions=5 --benchmark_report_aggregates_only=true]
#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

#include "graph_timing.h"
#include "numerics/cast.h"
#include "ops/cuda/convert.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/quantize.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/device_info.h"
#include "runtime/cuda/stream.h"

namespace {

using namespace fp8kit;

enum Variant : int { kBf16, kFp8Apart, kFp8Fused };
constexpr int64_t kIn = 32, kOut = 32;

void linear(benchmark::State& state, Variant variant) {
  if (cuda::list_devices().empty()) {
    state.SkipWithError("no CUDA GPU");
    return;
  }
  const int64_t rows = state.range(0);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(rows * kIn), w(kOut * kIn);
  for (float& e : x) e = normal(rng);
  for (float& e : w) e = 0.1f * normal(rng);
  std::vector<uint8_t> w_codes;
  std::vector<uint16_t> w_bf16;
  for (float e : w) {
    w_codes.push_back(encode_fp8(e, Fp8Format::E4M3));
    w_bf16.push_back(float_to_bf16(e));
  }
  cuda::DeviceBuffer<float> d_x(x.size()), y(rows * kOut), scalars(12);  // scale, amax, scale_invs 16 B apart
  cuda::DeviceBuffer<uint8_t> q(x.size()), q_t(x.size()), wq(w_codes.size());
  cuda::DeviceBuffer<uint16_t> xb(x.size()), xb_t(x.size()), wb(w_bf16.size());
  d_x.upload(x);
  wq.upload(w_codes);
  wb.upload(w_bf16);
  scalars.upload(std::vector<float>{1.0f, 0, 0, 0, 1.0f, 0, 0, 0, 1.0f, 0, 0, 0});
  const cuda::Stream owned;
  const cudaStream_t stream = owned.get();
  cuda::GemmContext gemms;

  const cuda::QuantizeArgs quantize{.x = d_x.data(),
                                    .rows = rows,
                                    .cols = kIn,
                                    .scale = scalars.data(),
                                    .q = q.data(),
                                    .q_t = q_t.data(),
                                    .amax = scalars.data() + 1};
  cuda::GemmArgs gemm;
  gemm.m = rows;
  gemm.n = kOut;
  gemm.k = kIn;
  gemm.y = y.data();
  gemm.y_type = DType::F32;
  const auto run = [&] {
    switch (variant) {
      case kBf16: {
        const cuda::Bf16Cast cast{d_x.data(), rows, kIn, xb.data(), xb_t.data()};
        cuda::float_to_bf16_transposed({&cast, 1}, stream);
        gemm.a = xb.data(), gemm.a_type = DType::Bf16, gemm.b = wb.data(), gemm.b_type = DType::Bf16;
        gemms.gemm(gemm, stream);
        break;
      }
      case kFp8Apart:
        cuda::quantize_fp8(quantize, stream);
        gemm.a = q.data(), gemm.a_type = DType::E4M3, gemm.b = wq.data(), gemm.b_type = DType::E4M3;
        gemm.a_scale_inv = scalars.data() + 4, gemm.b_scale_inv = scalars.data() + 8, gemm.fast_accumulation = true;
        gemms.gemm(gemm, stream);
        break;
      case kFp8Fused: {
        cuda::QuantizeArgs fused = quantize;
        fused.q = nullptr;  // as the seed model: only the transposed codes are read after it
        cuda::quantize_fp8_gemm(fused, wq.data(), Fp8Format::E4M3, kOut, scalars.data() + 4, scalars.data() + 8,
                                y.data(), stream);
        break;
      }
    }
  };
  bench::time_calls(state, stream, run);
  owned.synchronize();
}

// A fixed count: the manual time is per call, so a time-based count would run 50 times too long.
BENCHMARK_CAPTURE(linear, bf16, kBf16)->ArgName("rows")->Arg(6400)->Arg(32)->Iterations(100)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(linear, fp8_apart, kFp8Apart)->ArgName("rows")->Arg(6400)->Arg(32)->Iterations(100)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(linear, fp8_fused, kFp8Fused)->ArgName("rows")->Arg(6400)->Arg(32)->Iterations(100)->UseManualTime()->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
