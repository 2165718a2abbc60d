// Where tensors live (Device) and the one allocator behind them: raw bytes on the CPU or on the
// CUDA GPU, and explicit copies between the two. Nothing moves between devices implicitly.
#pragma once

#include <cstddef>
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

// `bytes` uninitialised bytes on `device`: CPU memory 64-byte aligned, GPU memory from cudaMalloc
// (256-byte aligned). Running out of memory throws an error that says how much was asked for and
// how much is free. 0 bytes gives nullptr.
void* allocate_bytes(Device device, size_t bytes);
void free_bytes(Device device, void* p) noexcept;
// Copies `bytes` from src (on src_device) to dst (on dst_device). Synchronous: when it returns, the
// copy is done, and work queued earlier on the legacy default stream has finished.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes);
// Sets `bytes` bytes at p (on device) to zero, synchronously.
void zero_bytes(Device device, void* p, size_t bytes);

}  // namespace fp8kit
