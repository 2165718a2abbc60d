// Checked CUDA runtime and cuBLASLt calls: builds the error messages (fmt is unusable in .cu files).
#include "runtime/cuda/check.h"

#include <fmt/format.h>

#include <string_view>

#include "base/error.h"

namespace fp8kit::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  std::string_view path(file);
  if (const size_t src = path.rfind("/src/"); src != std::string_view::npos) path.remove_prefix(src + 1);
  throw Error(fmt::format("CUDA call failed: {}: {} ({}) at {}:{}", call, cudaGetErrorString(status),
                          cudaGetErrorName(status), path, line));
}

[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const std::string& context) {
  throw Error(fmt::format("cuBLASLt call failed: {}: {} ({}){}{}", call, cublasLtGetStatusString(status),
                          cublasLtGetStatusName(status), context.empty() ? "" : " in ", context));
}

void check_launch(const char* kernel) {
  const cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess)
    throw Error(fmt::format("CUDA kernel launch failed: {}: {} ({})", kernel, cudaGetErrorString(status),
                            cudaGetErrorName(status)));
}

}  // namespace fp8kit::cuda
