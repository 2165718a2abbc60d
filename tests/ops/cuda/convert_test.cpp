// GPU dequantization and bf16 conversions against the CPU's scalar casts (numerics/cast.h).
#include "ops/cuda/convert.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <vector>

#include "base/error.h"
#include "numerics/cast.h"
#include "ops/cuda/device_buffer.h"
#include "ops/cuda/gpu_test.h"

namespace fp8kit::cuda {
namespace {

TEST(CudaConvert, DequantizeEveryCode) {
  FP8KIT_REQUIRE_GPU();
  // Every code 3 times over (769 elements: a ragged tail), at an offset that misaligns the vectors.
  std::vector<uint8_t> q(770);
  for (size_t i = 0; i < q.size(); ++i) q[i] = static_cast<uint8_t>(i);
  DeviceBuffer<uint8_t> d_q(q.size());
  d_q.upload(q);
  DeviceBuffer<float> out(q.size()), scale_inv(1);
  for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2})
    for (float s : {1.0f, 0.0123f, 3e30f})
      for (size_t offset : {0, 1}) {
        const std::vector<float> s_host = {s};
        scale_inv.upload(s_host);
        const int64_t count = static_cast<int64_t>(q.size() - offset);
        dequantize_fp8(d_q.data() + offset, count, format, scale_inv.data(), out.data(), nullptr);
        const std::vector<float> got = out.to_host();
        for (int64_t i = 0; i < count; ++i) {
          const float want = decode_fp8(q[i + offset], format) * s;
          if (std::isnan(want)) {
            EXPECT_TRUE(std::isnan(got[i])) << name(format) << " code " << int(q[i + offset]);
          } else {
            EXPECT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want))
                << name(format) << " code " << int(q[i + offset]) << " scale_inv " << s;
          }
        }
      }
}

TEST(CudaConvert, FloatToBf16MatchesCpu) {
  FP8KIT_REQUIRE_GPU();
  const std::vector<float> x = testing::awkward_floats((1 << 20) + 3, 21);
  DeviceBuffer<float> d_x(x.size());
  d_x.upload(x);
  DeviceBuffer<uint16_t> out(x.size());
  float_to_bf16(d_x.data(), static_cast<int64_t>(x.size()), out.data());
  const std::vector<uint16_t> got = out.to_host();
  size_t bad = 0;
  for (size_t i = 0; i < x.size(); ++i) bad += got[i] != fp8kit::float_to_bf16(x[i]);
  EXPECT_EQ(bad, 0u);
}

TEST(CudaConvert, EveryBf16ToFloat) {
  FP8KIT_REQUIRE_GPU();
  std::vector<uint16_t> h(65536 + 1);
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint16_t>(i);
  DeviceBuffer<uint16_t> d_h(h.size());
  d_h.upload(h);
  DeviceBuffer<float> out(h.size());
  bf16_to_float(d_h.data(), static_cast<int64_t>(h.size()), out.data());
  const std::vector<float> got = out.to_host();
  for (size_t i = 0; i < h.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(fp8kit::bf16_to_float(h[i]))) << i;
}

TEST(CudaConvert, BadArgumentsAreNamed) {
  FP8KIT_REQUIRE_GPU();
  EXPECT_THROW(float_to_bf16(nullptr, 4, nullptr), Error);
  EXPECT_THROW(bf16_to_float(nullptr, -1, nullptr), Error);
  DeviceBuffer<float> f(4);
  EXPECT_THROW(dequantize_fp8(reinterpret_cast<const uint8_t*>(f.data()), 4, Fp8Format::E4M3, nullptr, f.data()), Error);
  float_to_bf16(nullptr, 0, nullptr);  // empty is fine
}

}  // namespace
}  // namespace fp8kit::cuda
