// Device names and the CUDA availability checks: through the CUDA runtime when the CUDA backend is
// built, else a clear error.
#include "runtime/device.h"

#include "base/error.h"

#if FP8KIT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace fp8kit {

std::string_view name(Device device) {
  switch (device) {
    case Device::Cpu: return "cpu";
    case Device::Cuda: return "cuda";
  }
  return "?";
}

Device parse_device(std::string_view text) {
  if (text == "cpu") return Device::Cpu;
  if (text == "cuda") return Device::Cuda;
  fail("unknown device '{}': use cpu or cuda", text);
}

bool cuda_available() {
#if FP8KIT_HAVE_CUDA
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
#else
  return false;
#endif
}

void require_cuda() {
#if FP8KIT_HAVE_CUDA
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess)
    fail("no usable CUDA GPU: {} ({}); run on a machine with an NVIDIA GPU and driver, or use the CPU",
         cudaGetErrorString(status), cudaGetErrorName(status));
  if (count == 0) fail("no CUDA GPU is visible (check CUDA_VISIBLE_DEVICES), or use the CPU");
#else
  fail("this fp8kit was built without the CUDA backend (no nvcc when it was configured, or -DFP8KIT_CUDA=OFF): "
       "rebuild with the CUDA toolkit on PATH (cmake -DFP8KIT_CUDA=ON), or use the CPU");
#endif
}

}  // namespace fp8kit
