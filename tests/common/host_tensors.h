// Small tensors for tests: built on the host from floats (kept as f32 or rounded to bf16), and read
// back as floats from any device.
#pragma once

#include "numerics/cast.h"
#include "tensor/tensor.h"

#include <cstdint>
#include <vector>

namespace fp8kit::testing {

inline Tensor host_tensor(const std::vector<float>& values, std::vector<int64_t> shape, DType dtype = DType::F32) {
  Tensor t(std::move(shape), dtype);
  for (size_t i = 0; i < values.size(); ++i) {
    if (dtype == DType::F32) t.data<float>()[i] = values[i];
    else t.data<uint16_t>()[i] = float_to_bf16(values[i]);
  }
  return t;
}

// [1] f32 holding value, on `device`.
inline Tensor scalar_tensor(float value, Device device = Device::Cpu) { return host_tensor({value}, {1}).to(device); }

// The elements of an f32 or bf16 tensor on any device, as floats.
inline std::vector<float> float_values(const Tensor& t) {
  const Tensor host = t.to(Device::Cpu);
  std::vector<float> out(host.numel());
  for (int64_t i = 0; i < host.numel(); ++i)
    out[i] = host.dtype() == DType::F32 ? host.data<float>()[i] : bf16_to_float(host.data<uint16_t>()[i]);
  return out;
}

}  // namespace fp8kit::testing
