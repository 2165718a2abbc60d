// Checked CUDA calls and device buffers: failures name the call and CUDA's reason; copies round-trip.
#include "runtime/cuda/check.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/error.h"
#include "ops/cuda/gpu_test.h"
#include "runtime/cuda/device_buffer.h"
#include "runtime/cuda/stream.h"

namespace fp8kit::cuda {
namespace {

TEST(CudaCheck, FailedCallNamesTheCallAndTheError) {
  FP8KIT_REQUIRE_GPU();
  void* p = nullptr;
  try {
    FP8KIT_CUDA_CHECK(cudaMalloc(&p, size_t{1} << 52));  // 4 PiB
    FAIL() << "allocated 4 PiB";
  } catch (const Error& e) {
    const std::string message = e.what();
    EXPECT_NE(message.find("cudaMalloc"), std::string::npos) << message;
    EXPECT_NE(message.find("cudaErrorMemoryAllocation"), std::string::npos) << message;
  }
  cudaGetLastError();  // clear the (non-sticky) error for the tests that follow
}

TEST(CudaCheck, BuffersRoundTripAndRejectWrongSizes) {
  FP8KIT_REQUIRE_GPU();
  const std::vector<int> host = {1, -2, 3, 1 << 30};
  DeviceBuffer<int> buffer(host.size());
  buffer.upload(host);
  EXPECT_EQ(buffer.to_host(), host);
  DeviceBuffer<int> moved = std::move(buffer);
  EXPECT_EQ(moved.to_host(), host);
  EXPECT_EQ(buffer.size(), 0u);
  std::vector<int> wrong(3);
  EXPECT_THROW(moved.download(wrong), Error);
  Stream stream;
  moved.fill_bytes(0, stream.get());
  EXPECT_EQ(moved.to_host(stream.get()), std::vector<int>(4, 0));
}

TEST(CudaCheck, MacroThrowsWithCallText) {
  FP8KIT_REQUIRE_GPU();
  try {
    FP8KIT_CUDA_CHECK(cudaSetDevice(1 << 20));
    FAIL() << "selected device 2^20";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("cudaSetDevice(1 << 20)"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("cudaErrorInvalidDevice"), std::string::npos) << e.what();
  }
  cudaGetLastError();
}

}  // namespace
}  // namespace fp8kit::cuda
