// small_fp8_gemm against a plain loop over the CPU's FP8 decode (numerics/cast.h): the same fused
// multiply-adds in k order and the same scaling, so the same bits; every format pair, the seed
// model's dense_1 shapes (one output, or k = 1) and ragged ones.
#include "ops/cuda/small_fp8_gemm.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "numerics/cast.h"
#include "ops/cuda/gpu_test.h"
#include "runtime/cuda/device_buffer.h"

namespace fp8kit::cuda {
namespace {

// Random finite codes of `format` (NaN and inf codes replaced by 0x01).
std::vector<uint8_t> random_codes(size_t n, Fp8Format format, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<uint8_t> q(n);
  for (uint8_t& c : q) {
    c = static_cast<uint8_t>(rng());
    if (!std::isfinite(decode_fp8(c, format))) c = 0x01;
  }
  return q;
}

TEST(CudaSmallFp8Gemm, SameBitsAsDecodeAndFmaInOrder) {
  FP8KIT_REQUIRE_GPU();
  struct Shape {
    int64_t m, n, k;
  };
  const Fp8Format formats[] = {Fp8Format::E4M3, Fp8Format::E5M2};
  for (const Shape& s : {Shape{32, 1, 32}, Shape{32, 32, 1}, Shape{8, 1, 32}, Shape{32, 32, 8}, Shape{3, 5, 7},
                         Shape{1, 1, 1}, Shape{200, 17, 64}})
    for (Fp8Format af : formats)
      for (Fp8Format bf : formats)
        for (bool scaled : {false, true}) {
          const std::vector<uint8_t> a = random_codes(s.m * s.k, af, 1), b = random_codes(s.n * s.k, bf, 2);
          const std::vector<float> scales = {0.03125f, 3.7f};
          DeviceBuffer<uint8_t> d_a(a.size()), d_b(b.size());
          DeviceBuffer<float> d_scales(scales.size()), d_y(s.m * s.n);
          d_a.upload(a);
          d_b.upload(b);
          d_scales.upload(scales);
          small_fp8_gemm(s.m, s.n, s.k, d_a.data(), af, d_b.data(), bf, scaled ? d_scales.data() : nullptr,
                         scaled ? d_scales.data() + 1 : nullptr, d_y.data(), nullptr);
          const std::vector<float> y = d_y.to_host();
          const float alpha = scaled ? scales[0] * scales[1] : 1.0f;
          std::vector<float> want(y.size());
          for (int64_t i = 0; i < s.m; ++i)
            for (int64_t j = 0; j < s.n; ++j) {
              float dot = 0.0f;
              for (int64_t p = 0; p < s.k; ++p)
                dot = std::fma(decode_fp8(a[i * s.k + p], af), decode_fp8(b[j * s.k + p], bf), dot);
              want[i * s.n + j] = alpha * dot;
            }
          EXPECT_EQ(testing::max_ulp_difference(y, want), 0)
              << s.m << "x" << s.n << "x" << s.k << " " << name(af) << " x " << name(bf) << " scaled " << scaled;
        }
}

TEST(CudaSmallFp8Gemm, BadArgumentsAreNamed) {
  FP8KIT_REQUIRE_GPU();
  DeviceBuffer<uint8_t> q(4);
  DeviceBuffer<float> y(4);
  EXPECT_THROW(small_fp8_gemm(0, 1, 1, q.data(), Fp8Format::E4M3, q.data(), Fp8Format::E4M3, nullptr, nullptr,
                              y.data(), nullptr),
               Error);
  EXPECT_THROW(small_fp8_gemm(1, 1, 1, nullptr, Fp8Format::E4M3, q.data(), Fp8Format::E4M3, nullptr, nullptr,
                              y.data(), nullptr),
               Error);
}

}  // namespace
}  // namespace fp8kit::cuda
