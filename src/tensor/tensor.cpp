// Tensor storage (64-byte aligned, zeroed on growth) and the dtype table.
#include "tensor/tensor.h"

#include "base/error.h"

#include <cstring>
#include <new>
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

std::string_view name(Device device) { return device == Device::Cpu ? "cpu" : "?"; }

namespace {

constexpr std::align_val_t kAlignment{64};

int64_t checked_numel(std::span<const int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    FP8KIT_CHECK(d >= 0, "tensor dimensions must be >= 0, got {}", d);
    n *= d;
  }
  return n;
}

}  // namespace

void Tensor::Free::operator()(std::byte* p) const { ::operator delete[](p, kAlignment); }

Tensor::Tensor(std::vector<int64_t> shape, DType dtype, Device device) : dtype_(dtype), device_(device) {
  resize(shape);
}

Tensor Tensor::clone() const {
  Tensor copy(shape_, dtype_, device_);
  if (nbytes() > 0) std::memcpy(copy.storage_.get(), storage_.get(), nbytes());
  return copy;
}

void Tensor::resize(std::span<const int64_t> shape) {
  const int64_t n = checked_numel(shape);
  const size_t bytes = static_cast<size_t>(n) * dtype_size(dtype_);
  if (bytes > capacity_bytes_) {
    storage_.reset(static_cast<std::byte*>(::operator new[](bytes, kAlignment)));
    std::memset(storage_.get(), 0, bytes);
    capacity_bytes_ = bytes;
  }
  shape_.assign(shape.begin(), shape.end());  // reuses shape_'s capacity
  numel_ = n;
}

template <typename T>
void Tensor::check() const {
  bool ok = false;
  if constexpr (std::is_same_v<T, float>) ok = dtype_ == DType::F32;
  if constexpr (std::is_same_v<T, uint16_t>) ok = dtype_ == DType::Bf16;
  if constexpr (std::is_same_v<T, uint8_t>) ok = dtype_ == DType::E4M3 || dtype_ == DType::E5M2;
  if constexpr (std::is_same_v<T, int32_t>) ok = dtype_ == DType::I32;
  FP8KIT_CHECK(ok, "tensor access with the wrong element type: the tensor holds {}", name(dtype_));
}

template void Tensor::check<float>() const;
template void Tensor::check<uint16_t>() const;
template void Tensor::check<uint8_t>() const;
template void Tensor::check<int32_t>() const;

}  // namespace fp8kit
