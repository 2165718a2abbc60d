// Checked CUDA runtime and cuBLASLt calls: a failed call throws fp8kit::Error naming the call and
// CUDA's error string. Usable from .cu files: the messages are built in check.cpp.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

namespace fp8kit::cuda {

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
// `context` says what was being done (for GEMMs: the shapes and types).
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const std::string& context);
// Call right after a kernel launch: throws if the launch failed (bad configuration, no device, ...).
void check_launch(const char* kernel);

}  // namespace fp8kit::cuda

#define FP8KIT_CUDA_CHECK(call)                                                              \
  do {                                                                                       \
    const cudaError_t fp8kit_status_ = (call);                                               \
    if (fp8kit_status_ != cudaSuccess)                                                       \
      ::fp8kit::cuda::throw_cuda_error(fp8kit_status_, #call, __FILE__, __LINE__);           \
  } while (0)

#define FP8KIT_CUBLAS_CHECK(call, context)                                                   \
  do {                                                                                       \
    const cublasStatus_t fp8kit_status_ = (call);                                            \
    if (fp8kit_status_ != CUBLAS_STATUS_SUCCESS)                                             \
      ::fp8kit::cuda::throw_cublas_error(fp8kit_status_, #call, (context));                  \
  } while (0)
