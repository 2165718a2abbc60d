// CUDA device query: which GPU fp8kit runs on and whether it has FP8 tensor cores.
#include "runtime/cuda/device_info.h"

#include "runtime/cuda/check.h"

#include <cuda_runtime.h>

#include "base/error.h"
#include "runtime/cuda/check.h"

namespace fp8kit::cuda {

std::vector<DeviceInfo> list_devices() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status == cudaErrorNoDevice || status == cudaErrorInsufficientDriver) return {};
  if (status != cudaSuccess) throw Error(std::string("cudaGetDeviceCount failed: ") + cudaGetErrorString(status));
  std::vector<DeviceInfo> devices;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    const cudaError_t s = cudaGetDeviceProperties(&prop, i);
    if (s != cudaSuccess) throw Error(std::string("cudaGetDeviceProperties failed: ") + cudaGetErrorString(s));
    devices.push_back({i, prop.name, prop.major, prop.minor, prop.multiProcessorCount,
                       prop.totalGlobalMem, static_cast<size_t>(prop.l2CacheSize)});
  }
  return devices;
}

int current_device_attribute(cudaDeviceAttr attribute) {
  int device = 0, value = 0;
  FP8KIT_CUDA_CHECK(cudaGetDevice(&device));
  FP8KIT_CUDA_CHECK(cudaDeviceGetAttribute(&value, attribute, device));
  return value;
}

}  // namespace fp8kit::cuda
