// Current-scaling kernel: one thread per tensor, numerics/scale.cpp's current_scale on the device.
#include "ops/cuda/current_scaling.h"

#include <algorithm>
#include <string>

#include "base/error.h"
#include "ops/cuda/scale.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kMaxTensors = 32;

struct Tensors {
  int index[kMaxTensors];
  int count;
};

__global__ void current_scales_kernel(Tensors t, const float* amax, const float* fp8_max, int margin,
                                      bool power_of_two, float* scale, float* scale_inv, int64_t stride) {
  if (static_cast<int>(threadIdx.x) >= t.count) return;
  const int i = t.index[threadIdx.x];
  const float a = amax[i];
  const float s = current_scale(a, fp8_max[i], margin, power_of_two);
  scale[i] = s;
  scale_inv[i * stride] = __fdiv_rn(1.0f, s);
}

}  // namespace

void current_scales(std::span<const int> tensors, const float* amax, const float* fp8_max, ScaleOptions options,
                    float* scale, float* scale_inv, int64_t scale_inv_stride, cudaStream_t stream) {
  if (tensors.empty()) return;
  if (!amax || !fp8_max || !scale || !scale_inv)
    throw Error("current_scales: amax, fp8_max, scale and scale_inv are required");
  // kMaxTensors per launch (a model's weights, e.g. 7 per Llama block, take several).
  for (size_t first = 0; first < tensors.size(); first += kMaxTensors) {
    Tensors t{};
    t.count = static_cast<int>(std::min<size_t>(kMaxTensors, tensors.size() - first));
    for (int k = 0; k < t.count; ++k) {
      if (tensors[first + k] < 0) throw Error("current_scales: negative tensor index " + std::to_string(tensors[first + k]));
      t.index[k] = tensors[first + k];
    }
    current_scales_kernel<<<1, kMaxTensors, 0, stream>>>(t, amax, fp8_max, options.margin, options.power_of_two,
                                                         scale, scale_inv, scale_inv_stride);
    check_launch("current_scales");
  }
}

}  // namespace fp8kit::cuda
