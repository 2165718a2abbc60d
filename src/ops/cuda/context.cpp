// ops::Context on a CUDA GPU: lanes are non-blocking streams ordered by events, so a step queued on
// several lanes is captured as a graph with parallel branches.
#include "ops/cuda/context.h"

#include "base/error.h"
#include "ops/cuda/elementwise.h"
#include "runtime/cuda/check.h"

namespace fp8kit::ops {

namespace {

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  FP8KIT_CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
  return status != cudaStreamCaptureStatusNone;
}

}  // namespace

void Context::set_step(uint64_t step) {
  step_ = step;
  if (cuda_ != nullptr) {
    FP8KIT_CUDA_CHECK(cudaMemcpyAsync(cuda_->step.data(), &step_, sizeof step_, cudaMemcpyHostToDevice,
                                      stream(*this, Lane::Main)));
    FP8KIT_CUDA_CHECK(cudaStreamSynchronize(stream(*this, Lane::Main)));
  }
}

void Context::advance_step() {
  ++step_;
  if (cuda_ != nullptr) cuda::increment(cuda_->step.data(), stream(*this));
}

void Context::fork(Lane lane) {
  if (cuda_ == nullptr || lane == Lane::Main) return;
  forked_[static_cast<int>(lane)] = true;
  const cudaEvent_t event = cuda_->events[0].get();
  FP8KIT_CUDA_CHECK(cudaEventRecord(event, stream(*this, Lane::Main)));
  FP8KIT_CUDA_CHECK(cudaStreamWaitEvent(stream(*this, lane), event, 0));
}

void Context::join(Lane lane) {
  if (cuda_ == nullptr || lane == Lane::Main || !forked_[static_cast<int>(lane)]) return;
  const cudaEvent_t event = cuda_->events[static_cast<int>(lane)].get();
  FP8KIT_CUDA_CHECK(cudaEventRecord(event, stream(*this, lane)));
  FP8KIT_CUDA_CHECK(cudaStreamWaitEvent(stream(*this, Lane::Main), event, 0));
}

void Context::join_all() {
  for (Lane lane : {Lane::Side, Lane::A, Lane::B, Lane::Comm}) join(lane);
  forked_ = {};
}

void Context::follow_all(Lane lane) {
  if (cuda_ == nullptr) return;
  for (int from = 0; from < kLanes; ++from) {
    if (from == static_cast<int>(lane) || (from != 0 && !forked_[from])) continue;
    const cudaEvent_t event = cuda_->events[from].get();
    FP8KIT_CUDA_CHECK(cudaEventRecord(event, cuda_->streams[from].get()));
    FP8KIT_CUDA_CHECK(cudaStreamWaitEvent(stream(*this, lane), event, 0));
  }
  forked_[static_cast<int>(lane)] = true;
}

void Context::record(Marker& marker) {
  if (cuda_ == nullptr) return;
  if (marker.index_ < 0) {
    marker.index_ = static_cast<int>(cuda_->markers.size());
    cuda_->markers.emplace_back();
  }
  FP8KIT_CUDA_CHECK(cudaEventRecord(cuda_->markers[marker.index_].get(), stream(*this)));
}

void Context::wait(const Marker& marker) {
  if (cuda_ == nullptr) return;
  FP8KIT_CHECK(marker.index_ >= 0 && marker.index_ < static_cast<int>(cuda_->markers.size()),
               "waiting for a marker that this context never recorded");
  FP8KIT_CUDA_CHECK(cudaStreamWaitEvent(stream(*this), cuda_->markers[marker.index_].get(), 0));
}

void* Context::scratch(size_t bytes) {
  auto& buffer = cuda().scratch[static_cast<int>(lane_)];
  if (buffer.bytes() < bytes) {
    FP8KIT_CHECK(!capturing(stream(*this)),
                 "scratch of {} bytes asked for during a graph capture: run the step once eagerly first", bytes);
    // Work queued on any lane may still use the old buffer: let it finish before the buffer goes (the
    // eager first run of a step only; cudaFree's implicit synchronization is not a promise to build on).
    synchronize();
    buffer = cuda::DeviceBuffer<std::byte>(bytes);
    ++scratch_generation_;
  }
  return buffer.data();
}

void Context::synchronize() {
  if (cuda_ == nullptr) return;
  for (const cuda::Stream& s : cuda_->streams) s.synchronize();
}

}  // namespace fp8kit::ops
