// CUDA tensors: zeroed on creation, explicit copies both ways and on the device, host access refused
// with a message, resize keeping or growing device storage.
#include "tensor/tensor.h"

#include "base/error.h"
#include "ops/cuda/gpu_test.h"

#include <gtest/gtest.h>

#include <string>

namespace fp8kit {
namespace {

TEST(CudaTensor, ZeroedAndCopiedExplicitly) {
  FP8KIT_REQUIRE_GPU();
  Tensor host({3, 5}, DType::F32);
  for (int i = 0; i < 15; ++i) host.data<float>()[i] = 0.25f * i - 1.0f;
  const Tensor zeros({3, 5}, DType::F32, Device::Cuda);
  EXPECT_EQ(zeros.to(Device::Cpu).span<float>()[14], 0.0f);
  const Tensor gpu = host.to(Device::Cuda);
  EXPECT_EQ(gpu.device(), Device::Cuda);
  EXPECT_EQ(gpu.shape(), host.shape());
  const Tensor gpu_copy = gpu.clone();  // device to device
  Tensor back({3, 5}, DType::F32);
  back.copy_from(gpu_copy);
  for (int i = 0; i < 15; ++i) EXPECT_EQ(back.data<float>()[i], host.data<float>()[i]);
  EXPECT_NE(gpu_copy.device_data<float>(), gpu.device_data<float>());
}

TEST(CudaTensor, HostAccessIsRefusedWithAHint) {
  FP8KIT_REQUIRE_GPU();
  Tensor gpu({4}, DType::I32, Device::Cuda);
  try {
    gpu.data<int32_t>();
    FAIL() << "host access to a CUDA tensor";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("to(Device::Cpu)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(gpu.span<int32_t>(), Error);
  EXPECT_NO_THROW(gpu.device_data<int32_t>());
  EXPECT_THROW(gpu.device_data<float>(), Error);  // dtype still checked
}

TEST(CudaTensor, ResizeKeepsOrGrowsDeviceStorage) {
  FP8KIT_REQUIRE_GPU();
  Tensor host({8}, DType::F32);
  host.data<float>()[2] = 3.0f;
  Tensor gpu = host.to(Device::Cuda);
  const float* storage = gpu.device_data<float>();
  gpu.resize({4});
  EXPECT_EQ(gpu.device_data<float>(), storage);
  EXPECT_EQ(gpu.to(Device::Cpu).data<float>()[2], 3.0f);
  gpu.resize({1000});  // new storage, zeroed
  EXPECT_EQ(gpu.to(Device::Cpu).data<float>()[2], 0.0f);
}

TEST(CudaTensor, OutOfMemorySaysHowMuch) {
  FP8KIT_REQUIRE_GPU();
  try {
    Tensor huge({int64_t{1} << 40}, DType::F32, Device::Cuda);  // 4 TiB
    FAIL() << "a 4 TiB GPU tensor was allocated";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of GPU memory"), std::string::npos) << e.what();
  }
  Tensor after({16}, DType::F32, Device::Cuda);  // the failure left no error behind
  EXPECT_EQ(after.to(Device::Cpu).data<float>()[0], 0.0f);
}

}  // namespace
}  // namespace fp8kit
