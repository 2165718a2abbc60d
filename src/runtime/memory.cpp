// CPU memory from aligned operator new; GPU memory through the CUDA runtime when the CUDA backend is
// built, else a clear error.
#include "runtime/memory.h"

#include "base/error.h"

#include <cstring>
#include <new>

#if FP8KIT_HAVE_CUDA
#include <cuda_runtime.h>
#endif

namespace fp8kit {

namespace {

constexpr std::align_val_t kCpuAlignment{64};

#if FP8KIT_HAVE_CUDA
void check_cuda(cudaError_t status, std::string_view what) {
  if (status != cudaSuccess) fail("{} failed: {} ({})", what, cudaGetErrorString(status), cudaGetErrorName(status));
}
#endif
}  // namespace

void* allocate_bytes(Device device, size_t bytes) {
  if (bytes == 0) return nullptr;
  if (device == Device::Cpu) return ::operator new[](bytes, kCpuAlignment);
#if FP8KIT_HAVE_CUDA
  void* p = nullptr;
  const cudaError_t status = cudaMalloc(&p, bytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // an allocation failure is not sticky: clear it for the calls that follow
    size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    fail("out of GPU memory: {:.1f} MiB asked for, {:.1f} MiB free of {:.1f} MiB; use a smaller batch or model",
         bytes / 1048576.0, free / 1048576.0, total / 1048576.0);
  }
  if (status != cudaSuccess) require_cuda();  // explains a missing GPU or driver
  check_cuda(status, "cudaMalloc");
  return p;
#else
  require_cuda();
  return nullptr;
#endif
}

void free_bytes(Device device, void* p) noexcept {
  if (p == nullptr) return;
  if (device == Device::Cpu) {
    ::operator delete[](p, kCpuAlignment);
    return;
  }
#if FP8KIT_HAVE_CUDA
  cudaFree(p);  // cannot throw here; a broken context resurfaces at the next checked call
#endif
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes) {
  if (bytes == 0) return;
  if (dst_device == Device::Cpu && src_device == Device::Cpu) {
    std::memcpy(dst, src, bytes);
    return;
  }
#if FP8KIT_HAVE_CUDA
  check_cuda(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "copying a tensor between devices");
  // A device-to-device cudaMemcpy may return before it is done: wait, as promised.
  check_cuda(cudaStreamSynchronize(nullptr), "copying a tensor between devices");
#else
  require_cuda();
#endif
}

void zero_bytes(Device device, void* p, size_t bytes) {
  if (bytes == 0) return;
  if (device == Device::Cpu) {
    std::memset(p, 0, bytes);
    return;
  }
#if FP8KIT_HAVE_CUDA
  check_cuda(cudaMemset(p, 0, bytes), "zeroing GPU memory");
  check_cuda(cudaStreamSynchronize(nullptr), "zeroing GPU memory");
#else
  require_cuda();
#endif
}

}  // namespace fp8kit
