// Typed GPU arrays that free themselves (DeviceBuffer<T>, from the same allocator as CUDA tensors:
// runtime/memory.h), with explicit host <-> device copies on a stream.
// Nothing is copied implicitly: every transfer is a named call.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "base/error.h"
#include "runtime/cuda/check.h"
#include "runtime/memory.h"

namespace fp8kit::cuda {

// `count` elements of T in device memory (256-byte aligned), uninitialised. Move-only.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t count)
      : data_(static_cast<T*>(allocate_bytes(Device::Cuda, count * sizeof(T)))), count_(count) {}
  ~DeviceBuffer() { release(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), count_(std::exchange(other.count_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    if (this != &other) {
      release();
      data_ = std::exchange(other.data_, nullptr);
      count_ = std::exchange(other.count_, 0);
    }
    return *this;
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return count_; }
  size_t bytes() const { return count_ * sizeof(T); }

  // Host -> device; returns when the copy is done. host.size() must equal size().
  void upload(std::span<const T> host, cudaStream_t stream = nullptr) {
    check_size(host.size(), "upload");
    FP8KIT_CUDA_CHECK(cudaMemcpyAsync(data_, host.data(), bytes(), cudaMemcpyHostToDevice, stream));
    FP8KIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  // Device -> host; waits for the work queued on `stream` first.
  void download(std::span<T> host, cudaStream_t stream = nullptr) const {
    check_size(host.size(), "download");
    FP8KIT_CUDA_CHECK(cudaMemcpyAsync(host.data(), data_, bytes(), cudaMemcpyDeviceToHost, stream));
    FP8KIT_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  std::vector<T> to_host(cudaStream_t stream = nullptr) const {
    std::vector<T> host(count_);
    download(host, stream);
    return host;
  }
  // Sets every byte to `byte` (queued on `stream`).
  void fill_bytes(int byte, cudaStream_t stream = nullptr) {
    if (count_ > 0) FP8KIT_CUDA_CHECK(cudaMemsetAsync(data_, byte, bytes(), stream));
  }

 private:
  void release() noexcept {
    free_bytes(Device::Cuda, data_);
    data_ = nullptr;
    count_ = 0;
  }
  void check_size(size_t host_count, const char* what) const {
    if (host_count != count_)
      throw Error(std::string("DeviceBuffer::") + what + ": host span has " + std::to_string(host_count) +
                  " elements, the device buffer " + std::to_string(count_));
  }

  T* data_ = nullptr;
  size_t count_ = 0;
};

}  // namespace fp8kit::cuda
