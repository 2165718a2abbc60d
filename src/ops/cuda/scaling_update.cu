// Delayed-scaling update kernel: one block per tensor stages its history window in shared memory,
// reduces it (before and after the push, in one sweep), writes the rolled window back, and thread 0
// computes the scale with the same float operations as numerics/scale.cpp.
#include "ops/cuda/scaling_update.h"

#include <cfloat>
#include <string>

#include "base/error.h"
#include "ops/cuda/scale.cuh"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxHistory = 8192;

struct Options {
  bool current;  // every tensor's mode when the batch has no per-tensor flags
  ScalingLag lag;
  AmaxAlgorithm algorithm;
  int margin;
  bool power_of_two;
  bool skip_zero;
};

// Max that returns NaN as soon as either side is NaN (AmaxHistory::amax: a NaN slot makes it NaN).
__device__ __forceinline__ float max_nan(float a, float b) { return (a != a || b != b) ? __int_as_float(0x7FC00000) : fmaxf(a, b); }

__global__ void __launch_bounds__(kThreads) update_kernel(ScalingBatch b, Options o) {
  extern __shared__ float window[];
  __shared__ float partial[2][kThreads / 32];
  const int64_t L = b.history_length;
  float* history = b.amax_history + blockIdx.x * L;
  const float amax = b.amax[blockIdx.x];
  const bool push = !(o.skip_zero && amax == 0.0f);

  // Max over slots [0, L) (the window now) and [0, L - 1) (the slots that survive a push).
  float all = 0.0f, kept = 0.0f;
  for (int64_t j = threadIdx.x; j < L; j += blockDim.x) {
    const float a = history[j];
    window[j] = a;
    all = max_nan(all, a);
    if (j < L - 1) kept = max_nan(kept, a);
  }
  for (int offset = 16; offset > 0; offset /= 2) {
    all = max_nan(all, __shfl_xor_sync(0xFFFFFFFFu, all, offset));
    kept = max_nan(kept, __shfl_xor_sync(0xFFFFFFFFu, kept, offset));
  }
  if (threadIdx.x % 32 == 0) partial[0][threadIdx.x / 32] = all, partial[1][threadIdx.x / 32] = kept;
  __syncthreads();
  if (push) {
    for (int64_t j = threadIdx.x; j < L; j += blockDim.x) history[j] = j == 0 ? amax : window[j - 1];
  }
  if (threadIdx.x != 0) return;
  for (int w = 1; w < kThreads / 32; ++w) all = max_nan(all, partial[0][w]), kept = max_nan(kept, partial[1][w]);

  const bool recent = o.algorithm == AmaxAlgorithm::MostRecent;
  const float before = recent ? window[0] : all;
  const float after = !push ? before : recent ? amax : max_nan(amax, kept);
  const float fp8_max = b.fp8_max[blockIdx.x];
  if (b.current != nullptr ? b.current[blockIdx.x] != 0 : o.current) {  // the scale stays this step's own
    b.scale_inv[blockIdx.x] = __fdiv_rn(1.0f, b.scale[blockIdx.x]);
    return;
  }
  if (o.lag == ScalingLag::Te) {
    const float scale =
        usable_amax(after) ? scale_from_amax(after, fp8_max, o.margin, o.power_of_two) : b.scale[blockIdx.x];
    b.scale[blockIdx.x] = scale;
    b.scale_inv[blockIdx.x] = 1.0f / scale;
  } else {
    const float previous = b.scale_inv[blockIdx.x];
    const float sf = usable_amax(before) ? scale_from_amax(before, fp8_max, o.margin, o.power_of_two) : 1.0f / previous;
    const float multiplier = 1.0f / sf;
    b.scale_inv[blockIdx.x] = multiplier;
    b.scale[blockIdx.x] = 1.0f / multiplier;
  }
}

}  // namespace

void update_scaling(const ScalingBatch& batch, const Fp8Recipe& recipe, cudaStream_t stream) {
  if (batch.count < 0 || batch.count > 2147483647)
    throw Error("update_scaling: tensor count " + std::to_string(batch.count) + " is out of range");
  if (batch.count == 0) return;
  if (batch.history_length < 1 || batch.history_length > kMaxHistory)
    throw Error("update_scaling: amax history length " + std::to_string(batch.history_length) +
                " must be in [1, " + std::to_string(kMaxHistory) + "]");
  if (!batch.amax_history || !batch.amax || !batch.scale || !batch.scale_inv || !batch.fp8_max)
    throw Error("update_scaling: every array of the batch (amax_history, amax, scale, scale_inv, fp8_max) is required");
  const Options o{recipe.mode == ScalingMode::Current, recipe.lag, recipe.amax_algorithm, recipe.scale_options.margin,
                  recipe.scale_options.power_of_two, recipe.skip_zero_amax};
  const size_t shared = static_cast<size_t>(batch.history_length) * sizeof(float);  // <= 32 KiB
  update_kernel<<<static_cast<unsigned>(batch.count), kThreads, shared, stream>>>(batch, o);
  check_launch("update_scaling");
}

}  // namespace fp8kit::cuda
