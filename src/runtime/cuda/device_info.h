// CUDA device query: which GPU fp8kit runs on and whether it has FP8 tensor cores.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <vector>

namespace fp8kit::cuda {

struct DeviceInfo {
  int index;
  std::string name;
  int major, minor;  // compute capability
  int multiprocessors;
  size_t global_memory_bytes;
  size_t l2_bytes;
  // FP8 tensor cores: Ada (8.9) and Hopper (9.0) and later.
  bool has_fp8() const { return major > 8 || (major == 8 && minor >= 9); }
};

// All visible devices; empty when there is no GPU or no driver (never throws for that).
std::vector<DeviceInfo> list_devices();

// An attribute of the current device (SM count, shared memory per block, ...); throws on a CUDA error.
int current_device_attribute(cudaDeviceAttr attribute);

}  // namespace fp8kit::cuda
