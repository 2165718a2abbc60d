// The decode GEMMs of Llama-3-8B (y[m, n] = x[m, k] . W[n, k]^T: fused q/k/v, the attention output,
// fused gate/up, down, the lm head) at m = 1, 4, 8 on gemv (ops/cuda/gemv.h) and on cuBLASLt, and at
// m = 16, 64 on cuBLASLt: bf16 x bf16 -> bf16, and E4M3 (gemv: a per tensor x W per row, the inference
// recipe; cuBLASLt: per tensor x per tensor with fast accumulation, its quickest FP8 GEMM) -> bf16.
// Each time is the median of 7 launches of a CUDA graph of 40 back-to-back calls, the weight rotating
// among copies of at least 256 MiB in all (the 50 MB L2 holds none of them); GB/s counts W, x and y
// once; "% copy" compares it with cudaMemcpyAsync device-to-device in the same program (read + write).
// Usage: bench_cuda_gemv [m,m,...] (default 1,4,8,16,64)
#include "numerics/cast.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/gemv.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/device_info.h"
#include "runtime/cuda/graph.h"
#include "runtime/cuda/stream.h"

#include <algorithm>
#include <cstdio>
#include <exception>
#include <random>
#include <sstream>
#include <string>
#include <vector>

using namespace fp8kit;

namespace {

constexpr int kCalls = 40, kLaunches = 7;
constexpr size_t kRotation = size_t{256} << 20;

// Median microseconds per call of run(i) (i = 0..kCalls-1), as a CUDA graph of kCalls calls.
template <typename Run>
double time_us(cudaStream_t stream, Run&& run) {
  run(0);  // plans, shared-memory settings: before the capture
  const cuda::Graph graph = cuda::Graph::capture(stream, [&] {
    for (int i = 0; i < kCalls; ++i) run(i);
  });
  graph.launch(stream);  // warm-up
  std::vector<float> ms;
  for (int l = 0; l < kLaunches; ++l) {
    const cuda::Event start(true), stop(true);
    FP8KIT_CUDA_CHECK(cudaEventRecord(start.get(), stream));
    graph.launch(stream);
    FP8KIT_CUDA_CHECK(cudaEventRecord(stop.get(), stream));
    FP8KIT_CUDA_CHECK(cudaStreamSynchronize(stream));
    ms.push_back(cuda::elapsed_ms(start, stop));
  }
  std::nth_element(ms.begin(), ms.begin() + kLaunches / 2, ms.end());
  return ms[kLaunches / 2] * 1e3 / kCalls;
}

// `bytes` of device memory filled with copies of a random host block of bf16 values (bf16) or E4M3
// codes of N(0, 1) values (fp8); never NaN.
cuda::DeviceBuffer<uint8_t> random_device_bytes(size_t bytes, bool fp8) {
  constexpr size_t kBlock = size_t{16} << 20;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<uint8_t> host(kBlock);
  for (size_t i = 0; i < kBlock; i += fp8 ? 1 : 2) {
    if (fp8) {
      host[i] = encode_fp8(normal(rng), Fp8Format::E4M3);
    } else {
      const uint16_t h = float_to_bf16(normal(rng));
      host[i] = static_cast<uint8_t>(h & 0xFF), host[i + 1] = static_cast<uint8_t>(h >> 8);
    }
  }
  cuda::DeviceBuffer<uint8_t> out(bytes);
  for (size_t at = 0; at < bytes; at += kBlock)
    FP8KIT_CUDA_CHECK(cudaMemcpy(out.data() + at, host.data(), std::min(kBlock, bytes - at), cudaMemcpyHostToDevice));
  return out;
}

// Device-to-device copy bandwidth in GB/s (bytes read + written), of kRotation bytes.
double copy_gbps(cudaStream_t stream) {
  cuda::DeviceBuffer<uint8_t> from(kRotation), to(kRotation);
  const double us = time_us(stream, [&](int) {
    FP8KIT_CUDA_CHECK(cudaMemcpyAsync(to.data(), from.data(), kRotation, cudaMemcpyDeviceToDevice, stream));
  });
  return 2.0 * static_cast<double>(kRotation) / us * 1e-3;
}

struct Layer {
  const char* name;
  int64_t n, k;
};

}  // namespace

int main(int argc, char** argv) try {
  if (cuda::list_devices().empty()) {
    std::printf("no CUDA GPU\n");
    return 0;
  }
  std::vector<int64_t> ms = {1, 4, 8, 16, 64};
  if (argc > 1) {
    ms.clear();
    std::stringstream list(argv[1]);
    for (std::string m; std::getline(list, m, ',');) ms.push_back(std::stoll(m));
  }
  const cuda::Stream owned;
  const cudaStream_t stream = owned.get();
  const double copy = copy_gbps(stream);
  std::printf("gemv: copy D2D %.0f GB/s (read + write of 256 MiB); times: median of %d graphs of %d calls\n", copy,
              kLaunches, kCalls);
  const Layer layers[] = {{"qkv", 6144, 4096}, {"o", 4096, 4096}, {"gate_up", 28672, 4096}, {"down", 4096, 14336},
                          {"lm_head", 128256, 4096}};
  const int64_t max_m = *std::max_element(ms.begin(), ms.end());
  cuda::GemmContext cublas;
  for (const bool fp8 : {false, true}) {
    const size_t element = fp8 ? 1 : 2;
    const DType type = fp8 ? DType::E4M3 : DType::Bf16;
    for (const Layer& layer : layers) {
      const size_t w_bytes = static_cast<size_t>(layer.n * layer.k) * element;
      const int copies = static_cast<int>(std::max<size_t>(1, (kRotation + w_bytes - 1) / w_bytes));
      const cuda::DeviceBuffer<uint8_t> w = random_device_bytes(w_bytes * copies, fp8);
      const cuda::DeviceBuffer<uint8_t> x = random_device_bytes(static_cast<size_t>(max_m * layer.k) * element, fp8);
      cuda::DeviceBuffer<uint16_t> y(static_cast<size_t>(max_m * layer.n));
      // 16-byte aligned scales: a's at 0, b's per-tensor one at 4, then b's per-row ones.
      cuda::DeviceBuffer<float> scales(8 + layer.n);
      scales.upload(std::vector<float>(8 + layer.n, 0.01f));
      for (const int64_t m : ms) {
        cuda::GemmArgs g;
        g.m = m, g.n = layer.n, g.k = layer.k;
        g.a = x.data(), g.a_type = type, g.b_type = type;
        g.y = y.data(), g.y_type = DType::Bf16;
        const auto with_weight = [&](int i) {
          cuda::GemmArgs call = g;
          call.b = w.data() + static_cast<size_t>(i % copies) * w_bytes;
          return call;
        };
        cuda::GemmArgs own = with_weight(0);
        if (fp8) own.a_scale_inv = scales.data(), own.b_scale_inv = scales.data() + 8, own.b_scale_mode = cuda::ScaleMode::OuterVec;
        const bool gemv = cuda::gemv_fits(own);
        const double gemv_us = gemv ? time_us(stream, [&](int i) {
          cuda::GemmArgs call = own;
          call.b = with_weight(i).b;
          cuda::gemv(call, stream);
        })
                                    : 0.0;
        const double cublas_us = time_us(stream, [&](int i) {
          cuda::GemmArgs call = with_weight(i);
          if (fp8) call.a_scale_inv = scales.data(), call.b_scale_inv = scales.data() + 4, call.fast_accumulation = true;
          cublas.gemm(call, stream);
        });
        const double bytes = static_cast<double>(w_bytes + static_cast<size_t>(m * layer.k) * element +
                                                 static_cast<size_t>(m * layer.n) * 2);
        const auto rate = [&](double us) {
          const double gbps = bytes / us * 1e-3;
          char text[64];
          std::snprintf(text, sizeof text, "%7.1f us %5.0f GB/s %3.0f%%", us, gbps, 100.0 * gbps / copy);
          return std::string(text);
        };
        std::printf("gemv %-4s %-7s %6lldx%-5lld m=%-2lld: gemv %s | cuBLASLt %s%s\n", fp8 ? "fp8" : "bf16", layer.name,
                    static_cast<long long>(layer.n), static_cast<long long>(layer.k), static_cast<long long>(m),
                    gemv ? rate(gemv_us).c_str() : "                      -", rate(cublas_us).c_str(),
                    gemv ? (" | " + std::to_string(cublas_us / gemv_us).substr(0, 4) + "x").c_str() : "");
      }
    }
  }
  owned.synchronize();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
