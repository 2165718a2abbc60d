// Sigmoid + BCE kernel: one block, one thread per example (the logit's Linear epilogue first, when
// given); the loss is a block sum.
#include "ops/cuda/binary_crossentropy.h"

#include <string>

#include "base/error.h"
#include "ops/binary_crossentropy.h"
#include "ops/cuda/round.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kMaxBatch = 1024;

__global__ void kernel(const float* z, const float* labels, int batch, bool bf16, float* probs, float* loss,
                       float* dz, LinearEpilogue epilogue) {
  __shared__ float partial[kMaxBatch / 32];
  const int i = threadIdx.x;
  constexpr float kLow = ops::kBceEpsilon, kHigh = 1.0f - ops::kBceEpsilon;
  float term = 0.0f;
  if (i < batch) {
    float zi = z[i];
    if (epilogue.bias != nullptr) {
      zi = linear_epilogue(epilogue, zi, 0.0f, 0, epilogue.pre != nullptr ? epilogue.pre + i : nullptr);
      if (epilogue.y != nullptr) epilogue.y[i] = zi;
    }
    const float p = maybe_bf16(1.0f / (1.0f + expf(-zi)), bf16);
    probs[i] = p;
    if (labels != nullptr) {
      const float y = labels[i];
      const float pc = fminf(fmaxf(p, kLow), kHigh);
      term = -(y * logf(pc) + (1.0f - y) * logf(1.0f - pc));
      const float through_clip = (p > kLow && p < kHigh) ? 1.0f : (p == kLow || p == kHigh) ? 0.5f : 0.0f;
      const float dpc = -(y / pc - (1.0f - y) / (1.0f - pc)) * (1.0f / static_cast<float>(batch));
      dz[i] = dpc * through_clip * p * (1.0f - p);
    }
  }
  if (labels == nullptr) return;
  for (int o = 16; o > 0; o >>= 1) term += __shfl_xor_sync(0xFFFFFFFFu, term, o);
  if (i % 32 == 0) partial[i / 32] = term;
  __syncthreads();
  if (i == 0) {
    float sum = 0.0f;
    for (int w = 0; w < (blockDim.x + 31) / 32; ++w) sum += partial[w];
    *loss = sum / static_cast<float>(batch);
  }
}

}  // namespace

void sigmoid_binary_crossentropy(const float* z, const float* labels, int64_t batch, bool bf16, float* probs,
                                 float* loss, float* dz, cudaStream_t stream, const LinearEpilogue& epilogue) {
  if (batch <= 0 || batch > kMaxBatch)
    throw Error("sigmoid_binary_crossentropy: batch " + std::to_string(batch) + " must be in [1, 1024]");
  const int threads = static_cast<int>((batch + 31) / 32 * 32);
  check_epilogue(epilogue, {}, "sigmoid_binary_crossentropy");
  kernel<<<1, threads, 0, stream>>>(z, labels, static_cast<int>(batch), bf16, probs, loss, dz, epilogue);
  check_launch("sigmoid_binary_crossentropy");
}

}  // namespace fp8kit::cuda
