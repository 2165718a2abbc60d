// Tensor storage (from allocate_bytes, zeroed on growth), copies between devices, and the dtype table.
#include "tensor/tensor.h"

#include "base/error.h"

#include <fmt/ranges.h>

#include <type_traits>

namespace fp8kit {

size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::F32: return 4;
    case DType::Bf16: return 2;
    case DType::E4M3:
    case DType::E5M2: return 1;
    case DType::I32: return 4;
  }
  fail("unknown dtype {}", static_cast<int>(dtype));
}

std::string_view name(DType dtype) {
  switch (dtype) {
    case DType::F32: return "f32";
    case DType::Bf16: return "bf16";
    case DType::E4M3: return "e4m3";
    case DType::E5M2: return "e5m2";
    case DType::I32: return "i32";
  }
  return "?";
}

bool is_fp8(DType dtype) { return dtype == DType::E4M3 || dtype == DType::E5M2; }

DType dtype_of(Fp8Format format) { return format == Fp8Format::E4M3 ? DType::E4M3 : DType::E5M2; }

Fp8Format fp8_format(DType dtype) {
  FP8KIT_CHECK(is_fp8(dtype), "expected an FP8 tensor (e4m3 or e5m2), got {}",
               name(dtype));
  return dtype == DType::E4M3 ? Fp8Format::E4M3 : Fp8Format::E5M2;
}

namespace {

int64_t checked_numel(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    FP8KIT_CHECK(d >= 0, "tensor dimensions must be >= 0, got {}", d);
    n *= d;
  }
  return n;
}

}  // namespace

Tensor::Tensor(std::vector<int64_t> shape, DType dtype, Device device) : dtype_(dtype), device_(device) {
  resize(shape);
}

Tensor Tensor::clone() const { return to(device_); }

Tensor Tensor::view(int64_t offset, std::vector<int64_t> shape) const {
  const int64_t n = checked_numel(shape);
  const int64_t room = static_cast<int64_t>(capacity_bytes_ / dtype_size(dtype_));
  FP8KIT_CHECK(offset >= 0 && offset + n <= room, "view of elements [{}, {}) of a tensor with storage for {}", offset,
               offset + n, room);
  Tensor v;
  v.dtype_ = dtype_;
  v.device_ = device_;
  v.storage_ = storage_;
  v.offset_bytes_ = offset_bytes_ + static_cast<size_t>(offset) * dtype_size(dtype_);
  v.capacity_bytes_ = static_cast<size_t>(n) * dtype_size(dtype_);
  v.is_view_ = true;
  v.resize(shape);
  return v;
}

Tensor Tensor::to(Device device) const {
  Tensor copy(shape_, dtype_, device);
  copy.copy_from(*this);
  return copy;
}

void Tensor::copy_from(const Tensor& src) {
  FP8KIT_CHECK(src.dtype_ == dtype_ && src.shape_ == shape_,
               "copy_from: source is {} {}, destination {} {}: shapes and dtypes must match", name(src.dtype_),
               fmt::join(src.shape_, "x"), name(dtype_), fmt::join(shape_, "x"));
  copy_bytes(bytes(), device_, src.bytes(), src.device_, nbytes());
}

void Tensor::copy_from_host(const void* data) { copy_bytes(bytes(), device_, data, Device::Cpu, nbytes()); }

void Tensor::resize(std::span<const int64_t> shape) {
  const int64_t n = checked_numel(shape);
  const size_t bytes = static_cast<size_t>(n) * dtype_size(dtype_);
  if (bytes > capacity_bytes_) {
    FP8KIT_CHECK(!is_view_, "a view of {} bytes cannot grow to {}", capacity_bytes_, bytes);
    const Device device = device_;
    storage_.reset(static_cast<std::byte*>(allocate_bytes(device, bytes)), [device](std::byte* p) {
      free_bytes(device, p);
    });
    zero_bytes(device_, storage_.get(), bytes);
    capacity_bytes_ = bytes;
    offset_bytes_ = 0;
  }
  shape_.assign(shape.begin(), shape.end());  // reuses shape_'s capacity
  numel_ = n;
}

template <typename T>
void Tensor::check(Device expected) const {
  FP8KIT_CHECK(device_ == expected,
               "host access to a tensor on {}: copy it to the CPU first (to(Device::Cpu)), or use device_data()",
               name(device_));
  bool ok = std::is_same_v<T, std::byte>;  // untyped bytes: any dtype
  if constexpr (std::is_same_v<T, float>) ok = dtype_ == DType::F32;
  if constexpr (std::is_same_v<T, uint16_t>) ok = dtype_ == DType::Bf16;
  if constexpr (std::is_same_v<T, uint8_t>) ok = is_fp8(dtype_);
  if constexpr (std::is_same_v<T, int32_t>) ok = dtype_ == DType::I32;
  FP8KIT_CHECK(ok, "tensor access with the wrong element type: the tensor holds {}", name(dtype_));
}

template void Tensor::check<float>(Device) const;
template void Tensor::check<uint16_t>(Device) const;
template void Tensor::check<uint8_t>(Device) const;
template void Tensor::check<int32_t>(Device) const;
template void Tensor::check<std::byte>(Device) const;

}  // namespace fp8kit
