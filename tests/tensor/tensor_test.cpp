// Tensor: shapes, typed access checked against the dtype, zeroed storage, reuse on resize, clone.
#include "tensor/tensor.h"

#include "base/error.h"

#include <gtest/gtest.h>

#include <cstdint>

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

}  // namespace
}  // namespace fp8kit
