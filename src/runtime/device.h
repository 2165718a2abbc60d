// Where tensors live (Device) and whether the CUDA GPU can be used. Portable: without the CUDA
// backend, asking for Device::Cuda throws a clear error.
#pragma once

#include <cstdint>
#include <string_view>

namespace fp8kit {

enum class Device : uint8_t { Cpu, Cuda };

std::string_view name(Device device);  // "cpu", "cuda"
Device parse_device(std::string_view text);  // "cpu" | "cuda"; anything else throws

// Whether Device::Cuda can be used: this build has the CUDA backend and a GPU is visible.
bool cuda_available();
// Throws fp8kit::Error saying why Device::Cuda cannot be used (no CUDA backend in this build, no GPU,
// driver too old); returns when it can.
void require_cuda();

}  // namespace fp8kit
