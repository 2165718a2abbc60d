// The CUDA half of ops::Context: a stream, an event and a cuBLASLt context per lane, per-lane scratch,
// the device step counter that dropout reads, and cuDNN's state for SDPA. Kernels are queued on
// stream(context).
#pragma once

#include "ops/context.h"
#include "ops/cuda/dropout.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/sdpa.h"
#include "ops/dropout.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/stream.h"

#include <array>
#include <vector>
#include <cuda_runtime.h>

namespace fp8kit::ops {

struct Context::Cuda {
  std::array<cuda::Stream, kLanes> streams;
  std::array<cuda::Event, kLanes> events;
  std::vector<cuda::Event> markers;  // Context::Marker's, by index
  std::array<cuda::GemmContext, kLanes> gemms;
  std::array<cuda::DeviceBuffer<std::byte>, kLanes> scratch;
  cuda::DeviceBuffer<uint64_t> step{1};
  cuda::SdpaGraphsPtr sdpa;  // made at the first SDPA call; last, so its cuDNN handles go before the streams

  Cuda() : events{cuda::Event(), cuda::Event(), cuda::Event(), cuda::Event(), cuda::Event()} {}
};

// The current lane's stream, cuBLASLt context, and the device step counter.
inline cudaStream_t stream(Context& c) { return c.cuda().streams[static_cast<int>(c.lane())].get(); }
inline cudaStream_t stream(Context& c, Lane lane) { return c.cuda().streams[static_cast<int>(lane)].get(); }
inline cuda::GemmContext& gemm(Context& c) { return c.cuda().gemms[static_cast<int>(c.lane())]; }
inline const uint64_t* device_step(Context& c) { return c.cuda().step.data(); }
inline uint64_t* mutable_device_step(Context& c) { return c.cuda().step.data(); }

// A step's dropout site as the kernels take it (the step read from the device counter).
inline cuda::DropoutSite dropout_site(Context& c, const DropoutSpec& d) {
  return {c.seed(), device_step(c), d.site, d.rate, d.active && d.rate > 0.0f};
}

}  // namespace fp8kit::ops
