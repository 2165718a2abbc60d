// Tensor: shape, dtype, device and owned storage, row-major and contiguous, on the CPU or a CUDA GPU.
// Moving a tensor between devices is always an explicit copy: to() or copy_from().
#pragma once

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "numerics/format.h"
#include "runtime/memory.h"

namespace fp8kit {

// E4M3 / E5M2 hold raw FP8 codes (uint8_t), Bf16 raw bf16 bits (uint16_t).
enum class DType : uint8_t { F32, Bf16, E4M3, E5M2, I32 };

size_t dtype_size(DType dtype);
std::string_view name(DType dtype);  // "f32", "bf16", "e4m3", "e5m2", "i32"
bool is_fp8(DType dtype);  // E4M3 or E5M2
DType dtype_of(Fp8Format format);
Fp8Format fp8_format(DType dtype);  // E4M3 or E5M2, else throws

class Tensor {
 public:
  Tensor() = default;
  // Zero-filled; dims must be >= 0.
  Tensor(std::vector<int64_t> shape, DType dtype, Device device = Device::Cpu);
  Tensor(Tensor&&) noexcept = default;
  Tensor& operator=(Tensor&&) noexcept = default;
  Tensor(const Tensor&) = delete;  // copies are explicit: clone()
  Tensor& operator=(const Tensor&) = delete;
  Tensor clone() const;
  // A tensor of `shape` over this one's elements [offset, offset + numel(shape)), sharing its storage
  // (which lives while any view does): e.g. every parameter of a model as a view of one flat buffer,
  // so that one launch updates them all. Views of views are views of the same storage. The range may
  // reach past the current shape into storage a resize() kept (a buffer written by a replayed CUDA
  // graph at the size it was captured with, while the host last resized it smaller).
  Tensor view(int64_t offset, std::vector<int64_t> shape) const;
  // Whether both tensors use the same storage (one is a view of the other, or both of a third).
  bool shares_storage(const Tensor& other) const { return storage_ != nullptr && storage_ == other.storage_; }
  // A copy of this tensor on `device` (the same device: a clone).
  Tensor to(Device device) const;
  // Copies src's elements into this tensor, from any device to any device; shapes and dtypes must match.
  void copy_from(const Tensor& src);
  // Copies nbytes() bytes of host memory (elements of this tensor's dtype) into it, on its device.
  void copy_from_host(const void* data);

  const std::vector<int64_t>& shape() const { return shape_; }
  int64_t dim(size_t i) const { return shape_.at(i); }
  size_t rank() const { return shape_.size(); }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int64_t numel() const { return numel_; }
  size_t nbytes() const { return static_cast<size_t>(numel_) * dtype_size(dtype_); }

  // Typed host access; T must match the dtype (float: F32, uint16_t: Bf16, uint8_t: E4M3/E5M2,
  // int32_t: I32; std::byte: any), and the tensor must be on the CPU, else throws.
  template <typename T>
  T* data() {
    check<T>(Device::Cpu);
    return reinterpret_cast<T*>(bytes());
  }
  template <typename T>
  const T* data() const {
    check<T>(Device::Cpu);
    return reinterpret_cast<const T*>(bytes());
  }
  // The elements' address on the tensor's own device (a GPU pointer for CUDA tensors), for kernels.
  template <typename T>
  T* device_data() {
    check<T>(device_);
    return reinterpret_cast<T*>(bytes());
  }
  template <typename T>
  const T* device_data() const {
    check<T>(device_);
    return reinterpret_cast<const T*>(bytes());
  }
  template <typename T>
  std::span<T> span() {
    return {data<T>(), static_cast<size_t>(numel_)};
  }
  template <typename T>
  std::span<const T> span() const {
    return {data<T>(), static_cast<size_t>(numel_)};
  }

  // Gives the tensor a new shape, keeping the storage when it is large enough (so a buffer sized
  // for the largest batch is reused for smaller ones without allocating). Grown storage is zeroed;
  // kept storage keeps its contents. A view cannot grow past the elements it was given.
  void resize(std::span<const int64_t> shape);
  void resize(std::initializer_list<int64_t> shape) { resize(std::span<const int64_t>(shape.begin(), shape.size())); }

 private:
  template <typename T>
  void check(Device expected) const;
  std::byte* bytes() const { return storage_.get() + offset_bytes_; }

  std::vector<int64_t> shape_;
  DType dtype_ = DType::F32;
  Device device_ = Device::Cpu;
  int64_t numel_ = 0;
  size_t capacity_bytes_ = 0;  // from bytes() on
  size_t offset_bytes_ = 0;    // into storage_ (views)
  bool is_view_ = false;
  std::shared_ptr<std::byte> storage_;  // from allocate_bytes
};

}  // namespace fp8kit
