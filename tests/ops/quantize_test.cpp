// Tensor-level FP8 quantization on the CPU against the scalar casts: codes, transposed codes, amax,
// scale_inv, current scaling, dequantization, and the errors for bad arguments.
#include "ops/quantize.h"

#include "base/error.h"
#include "common/gradient_check.h"
#include "common/host_tensors.h"
#include "numerics/cast.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

namespace fp8kit::ops {
namespace {

TEST(QuantizeTensor, CodesTransposeAmaxAndScaleInvMatchTheScalarCast) {
  const int64_t rows = 5, cols = 7;
  std::vector<float> x = testing::random_vector(rows * cols, 11, -300.0f, 300.0f);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[8] = -1000.0f;  // saturates to -448 after scaling by 0.5
  for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    const Fp8Tensor q = quantize_fp8(testing::host_tensor(x, {rows, cols}), format, testing::scalar_tensor(0.5f), true);
    ASSERT_EQ(q.data.shape(), (std::vector<int64_t>{rows, cols}));
    ASSERT_EQ(q.data_t.shape(), (std::vector<int64_t>{cols, rows}));
    EXPECT_EQ(q.data.dtype(), dtype_of(format));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t want = encode_fp8(x[r * cols + c] * 0.5f, format);
        EXPECT_EQ(q.data.data<uint8_t>()[r * cols + c], want) << r << "," << c;
        EXPECT_EQ(q.data_t.data<uint8_t>()[c * rows + r], want) << r << "," << c;
      }
    }
    EXPECT_EQ(q.amax.data<float>()[0], 1000.0f);  // NaN ignored
    EXPECT_EQ(q.scale_inv.data<float>()[0], 2.0f);
  }
}

TEST(QuantizeTensor, Bf16InputAndVectors) {
  Tensor x({4}, DType::Bf16);
  const float values[] = {1.0f, -2.5f, 0.3f, 100.0f};
  for (int i = 0; i < 4; ++i) x.data<uint16_t>()[i] = float_to_bf16(values[i]);
  const Fp8Tensor q = quantize_fp8(x, Fp8Format::E4M3, testing::scalar_tensor(2.0f));
  EXPECT_EQ(q.data.shape(), (std::vector<int64_t>{4}));
  EXPECT_EQ(q.data_t.numel(), 0);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(q.data.data<uint8_t>()[i], encode_fp8(round_bf16(values[i]) * 2.0f, Fp8Format::E4M3));
  EXPECT_EQ(q.amax.data<float>()[0], 100.0f);
}

TEST(QuantizeTensor, CurrentScalingUsesTheTensorsOwnAmax) {
  const std::vector<float> x = testing::random_vector(64, 5, -3.0f, 3.0f);
  const Tensor t = testing::host_tensor(x, {8, 8});
  const Fp8Tensor q = quantize_fp8_current(t, Fp8Format::E4M3, {.margin = 1});
  float amax = 0;
  for (float v : x) amax = std::max(amax, std::fabs(v));
  const float scale = current_scale(amax, Fp8Format::E4M3, {.margin = 1});
  EXPECT_EQ(q.scale_inv.data<float>()[0], 1.0f / scale);
  EXPECT_EQ(q.amax.data<float>()[0], amax);
  const Tensor back = dequantize(q);
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = decode_fp8(encode_fp8(x[i] * scale, Fp8Format::E4M3), Fp8Format::E4M3) *
                       (1.0f / scale);
    EXPECT_EQ(back.data<float>()[i], want) << i;
  }
}

TEST(QuantizeTensor, BadArgumentsSayWhatToFix) {
  const Tensor x({2, 2}, DType::F32);
  EXPECT_THROW(quantize_fp8(x, Fp8Format::E4M3, testing::scalar_tensor(0.0f)), Error);
  EXPECT_THROW(quantize_fp8(x, Fp8Format::E4M3, testing::scalar_tensor(std::numeric_limits<float>::infinity())), Error);
  EXPECT_THROW(quantize_fp8(x, Fp8Format::E4M3, Tensor({2}, DType::F32)), Error);
  EXPECT_THROW(quantize_fp8(Tensor({2, 2, 2}, DType::F32), Fp8Format::E4M3, testing::scalar_tensor(1.0f)), Error);
  EXPECT_THROW(quantize_fp8(Tensor({2, 2}, DType::I32), Fp8Format::E4M3, testing::scalar_tensor(1.0f)), Error);
}

}  // namespace
}  // namespace fp8kit::ops
