// Owned CUDA streams (Stream) and events (Event), and the time between two timing events.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "runtime/cuda/check.h"

namespace fp8kit::cuda {

// A CUDA stream that does not synchronise with the legacy default stream; destroyed with its owner.
class Stream {
 public:
  Stream() { FP8KIT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking)); }
  ~Stream() { cudaStreamDestroy(stream_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  cudaStream_t get() const { return stream_; }
  void synchronize() const { FP8KIT_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  cudaStream_t stream_ = nullptr;
};

// A CUDA event, destroyed with its owner. Plain events only order streams (cheaper); timing ones
// also measure (elapsed_ms). Move-only.
class Event {
 public:
  explicit Event(bool timing = false) {
    FP8KIT_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
  }
  ~Event() {
    if (event_ != nullptr) cudaEventDestroy(event_);
  }
  Event(Event&& other) noexcept : event_(std::exchange(other.event_, nullptr)) {}
  Event& operator=(Event&&) = delete;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;

  cudaEvent_t get() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// Milliseconds between two recorded timing events; waits for `stop`.
inline float elapsed_ms(const Event& start, const Event& stop) {
  FP8KIT_CUDA_CHECK(cudaEventSynchronize(stop.get()));
  float ms = 0.0f;
  FP8KIT_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
  return ms;
}

}  // namespace fp8kit::cuda
