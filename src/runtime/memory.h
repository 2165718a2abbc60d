// The one allocator behind tensors and device buffers: raw bytes on the CPU or on the CUDA GPU, and
// explicit copies between the two. Nothing moves between devices implicitly.
#pragma once

#include <cstddef>

#include "runtime/device.h"

namespace fp8kit {

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
