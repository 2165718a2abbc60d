// Programmatic dependent launch (Hopper): a kernel queued with launch_dependent() may be scheduled
// while the kernel before it on the stream is still running, so that its launch, and whatever it
// reads that no earlier kernel writes (a GEMV's weights), overlap that kernel's tail. Decode steps
// are chains of short kernels, where those gaps are a large part of the time.
// The contract: a kernel launched this way calls wait_for_prior_grids() in every thread before it
// reads or writes memory that earlier kernels use (the wait returns once they have completed and
// their writes are visible); allow_dependent_launch() lets the next kernel be scheduled early. Both
// are no-ops in a kernel launched plainly, and below sm_90. FP8KIT_PDL=0 turns the launches plain
// (for measuring the difference).
#pragma once

#include <cuda_runtime.h>

#include <cstdlib>
#include <cstring>
#include <utility>

#include "runtime/cuda/check.h"

namespace fp8kit::cuda {

__device__ __forceinline__ void wait_for_prior_grids() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void allow_dependent_launch() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

inline bool dependent_launch_enabled() {
  static const bool enabled = [] {
    const char* v = std::getenv("FP8KIT_PDL");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return enabled;
}

// Queues kernel<<<grid, block, smem, stream>>>(args...) as a programmatic dependent of the kernel
// before it; cluster_x > 1: blocks in clusters of that many.
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream,
                      unsigned cluster_x, Args&&... args) {
  cudaLaunchAttribute attributes[2]{};
  unsigned count = 0;
  if (dependent_launch_enabled()) {
    attributes[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attributes[count++].val.programmaticStreamSerializationAllowed = 1;
  }
  if (cluster_x > 1) {
    attributes[count].id = cudaLaunchAttributeClusterDimension;
    attributes[count].val.clusterDim.x = cluster_x;
    attributes[count].val.clusterDim.y = 1;
    attributes[count++].val.clusterDim.z = 1;
  }
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem;
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = count;
  FP8KIT_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
}

}  // namespace fp8kit::cuda
