// Tensor: shapes, typed access checked against the dtype, zeroed storage, reuse on resize, clone,
// explicit copies; without a GPU, CUDA tensors fail with a clear error (tests/tensor/cuda/ covers the GPU).
#include "tensor/tensor.h"

#include "base/error.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

namespace fp8kit {
namespace {

TEST(Tensor, ShapeDtypeAndZeroedStorage) {
  Tensor t({2, 3, 4}, DType::F32);
  EXPECT_EQ(t.rank(), 3u);
  EXPECT_EQ(t.dim(1), 3);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.nbytes(), 96u);
  EXPECT_EQ(t.device(), Device::Cpu);
  for (float v : t.span<float>()) EXPECT_EQ(v, 0.0f);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data<float>()) % 64, 0u);
  EXPECT_THROW(t.data<uint8_t>(), Error);
  Tensor codes({5}, DType::E5M2);
  EXPECT_EQ(codes.nbytes(), 5u);
  EXPECT_NO_THROW(codes.data<uint8_t>());
  Tensor scalar({}, DType::I32);
  EXPECT_EQ(scalar.numel(), 1);
  EXPECT_EQ(dtype_size(DType::Bf16), 2u);
  EXPECT_EQ(name(DType::E4M3), "e4m3");
  EXPECT_THROW(Tensor({2, -1}, DType::F32), Error);
}

TEST(Tensor, ResizeReusesStorageAndCloneCopies) {
  Tensor t({4, 8}, DType::F32);
  t.data<float>()[3] = 7.0f;
  const float* storage = t.data<float>();
  t.resize({2, 8});  // smaller: same storage, contents kept
  EXPECT_EQ(t.data<float>(), storage);
  EXPECT_EQ(t.numel(), 16);
  EXPECT_EQ(t.data<float>()[3], 7.0f);
  t.resize({4, 8});
  EXPECT_EQ(t.data<float>(), storage);
  t.resize({100});  // larger: new zeroed storage
  EXPECT_EQ(t.data<float>()[3], 0.0f);
  t.data<float>()[99] = 1.5f;
  const Tensor c = t.clone();
  EXPECT_EQ(c.shape(), t.shape());
  EXPECT_EQ(c.data<float>()[99], 1.5f);
  EXPECT_NE(c.data<float>(), t.data<float>());
}

TEST(Tensor, CopiesAreExplicitAndChecked) {
  Tensor a({2, 3}, DType::I32);
  for (int i = 0; i < 6; ++i) a.data<int32_t>()[i] = i * i;
  const Tensor b = a.to(Device::Cpu);
  EXPECT_EQ(b.span<int32_t>()[5], 25);
  Tensor c({2, 3}, DType::I32);
  c.copy_from(a);
  EXPECT_EQ(c.span<int32_t>()[4], 16);
  Tensor wrong_shape({3, 2}, DType::I32), wrong_dtype({2, 3}, DType::F32);
  EXPECT_THROW(wrong_shape.copy_from(a), Error);
  EXPECT_THROW(wrong_dtype.copy_from(a), Error);
  EXPECT_EQ(a.device_data<int32_t>(), a.data<int32_t>());  // on the CPU, both name host memory
}

TEST(Device, NamesAndParsing) {
  EXPECT_EQ(name(Device::Cpu), "cpu");
  EXPECT_EQ(name(Device::Cuda), "cuda");
  EXPECT_EQ(parse_device("cuda"), Device::Cuda);
  EXPECT_THROW(parse_device("gpu"), Error);
  EXPECT_EQ(dtype_of(Fp8Format::E5M2), DType::E5M2);
  EXPECT_EQ(fp8_format(DType::E4M3), Fp8Format::E4M3);
  EXPECT_THROW(fp8_format(DType::Bf16), Error);
}

TEST(Device, CudaWithoutGpuFailsClearly) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is present: tests/tensor/cuda/ covers CUDA tensors";
  try {
    Tensor t({4}, DType::F32, Device::Cuda);
    FAIL() << "a CUDA tensor was created without a GPU";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_TRUE(what.find("CUDA") != std::string::npos || what.find("GPU") != std::string::npos) << what;
  }
  EXPECT_THROW(require_cuda(), Error);
}

TEST(Tensor, ViewsShareStorageAndCannotGrow) {
  Tensor flat({10}, DType::F32);
  Tensor a = flat.view(2, {2, 3});
  a.data<float>()[0] = 5.0f;
  a.data<float>()[5] = 7.0f;
  EXPECT_EQ(flat.data<float>()[2], 5.0f);
  EXPECT_EQ(flat.data<float>()[7], 7.0f);
  EXPECT_TRUE(a.shares_storage(flat));
  const Tensor b = a.view(1, {4});  // a view of a view: the same storage, offsets added
  EXPECT_EQ(b.data<float>()[4], 7.0f);
  a.resize({3});  // shrinking keeps the view's elements
  EXPECT_EQ(a.data<float>()[0], 5.0f);
  EXPECT_THROW(a.resize({7}), Error);
  EXPECT_THROW(flat.view(8, {3}), Error);
  Tensor shrunk({8}, DType::F32);  // resized down, its storage still holds 8 (a replayed graph's size)
  shrunk.data<float>()[7] = 3.0f;
  shrunk.resize({2});
  EXPECT_EQ(shrunk.view(0, {8}).data<float>()[7], 3.0f);
  EXPECT_THROW(shrunk.view(0, {9}), Error);
  Tensor view_outlives = Tensor({4}, DType::F32).view(1, {2});  // the storage lives while a view does
  view_outlives.data<float>()[1] = 1.0f;
  EXPECT_EQ(view_outlives.data<float>()[1], 1.0f);
}

}  // namespace
}  // namespace fp8kit
