// quantize_fp8_batch against one quantize_fp8 launch per tensor, byte for byte: codes, transposes, amaxes
// and 1/scale of many tensors (more than one launch's worth, awkward shapes and misaligned pointers),
// fp32 and bf16, both formats, multiply and divide scales.
#include <gtest/gtest.h>

#include <bit>
#include <string>
#include <vector>

#include "base/error.h"
#include "numerics/cast.h"
#include "ops/cuda/gpu_test.h"
#include "ops/cuda/quantize.h"
#include "runtime/cuda/check.h"
#include "runtime/cuda/device_buffer.h"

namespace fp8kit::cuda {
namespace {

// The seed model's weight shapes, then awkward ones (odd sizes make the pointers after them misaligned);
// more than one launch's 16 tensors.
const int64_t kShapes[][2] = {{32, 32}, {32, 32}, {32, 32}, {32, 32}, {32, 128}, {128, 32}, {32, 32}, {32, 1},
                              {5, 17},  {217, 256}, {1, 1}, {600, 200}, {33, 1}, {64, 64}, {7, 3}, {100, 33},
                              {16, 16}, {2, 300}, {6400, 32}};
constexpr int kCount = sizeof(kShapes) / sizeof(kShapes[0]);

struct Outputs {
  std::vector<uint8_t> q, q_t;
  std::vector<float> amax_and_scale_inv;  // [tensor] x {amax, scale_inv}
};

// All tensors packed back to back in one buffer (so most start misaligned); batched or one launch each.
template <typename In>
Outputs run(const std::vector<In>& x, Fp8Format format, bool divide, bool batched) {
  DeviceBuffer<In> d_x(x.size());
  d_x.upload(x);
  DeviceBuffer<uint8_t> q(x.size()), q_t(x.size());
  q.fill_bytes(0xA5);
  q_t.fill_bytes(0xA5);
  std::vector<float> scales(kCount), init(2 * kCount);
  for (int t = 0; t < kCount; ++t) scales[t] = divide ? 0.37f * (t + 1) : 3e-3f * (1 << t), init[2 * t] = 0.0f;
  DeviceBuffer<float> d_scales(kCount), d_out(2 * kCount);
  d_scales.upload(scales);
  d_out.upload(init);
  std::vector<QuantizeArgs> args;
  int64_t at = 0;
  for (int t = 0; t < kCount; ++t) {
    QuantizeArgs a;
    a.x = d_x.data() + at;
    a.x_type = sizeof(In) == 4 ? DType::F32 : DType::Bf16;
    a.rows = kShapes[t][0];
    a.cols = kShapes[t][1];
    a.format = format;
    a.scale = d_scales.data() + t;
    a.divide = divide;
    a.q = q.data() + at;
    a.q_t = q_t.data() + at;
    a.amax = d_out.data() + 2 * t;
    a.scale_inv = d_out.data() + 2 * t + 1;
    args.push_back(a);
    at += a.rows * a.cols;
  }
  if (batched) {
    quantize_fp8_batch(args);
  } else {
    for (const QuantizeArgs& a : args) quantize_fp8(a);
  }
  FP8KIT_CUDA_CHECK(cudaDeviceSynchronize());
  return {q.to_host(), q_t.to_host(), d_out.to_host()};
}

int64_t total_elements() {
  int64_t n = 0;
  for (const auto& shape : kShapes) n += shape[0] * shape[1];
  return n;
}

template <typename In>
void expect_same(const std::vector<In>& x, const std::string& what) {
  for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
    for (bool divide : {false, true}) {
      const std::string label = what + " " + std::string(fp8kit::name(format)) + (divide ? " divide" : " multiply");
      const Outputs one = run(x, format, divide, false), batch = run(x, format, divide, true);
      EXPECT_TRUE(batch.q == one.q) << label << ": codes differ";
      EXPECT_TRUE(batch.q_t == one.q_t) << label << ": transposed codes differ";
      for (int i = 0; i < 2 * kCount; ++i)
        EXPECT_EQ(std::bit_cast<uint32_t>(batch.amax_and_scale_inv[i]), std::bit_cast<uint32_t>(one.amax_and_scale_inv[i]))
            << label << ": tensor " << i / 2 << (i % 2 ? " scale_inv" : " amax");
    }
  }
}

TEST(CudaQuantizeBatch, F32MatchesOneLaunchPerTensor) {
  FP8KIT_REQUIRE_GPU();
  expect_same(testing::awkward_floats(total_elements(), 7), "f32");
}

TEST(CudaQuantizeBatch, Bf16MatchesOneLaunchPerTensor) {
  FP8KIT_REQUIRE_GPU();
  const std::vector<float> f = testing::awkward_floats(total_elements(), 8);
  std::vector<uint16_t> x(f.size());
  for (size_t i = 0; i < f.size(); ++i) x[i] = float_to_bf16(f[i]);
  expect_same(x, "bf16");
}

TEST(CudaQuantizeBatch, MixedTensorsAreRefused) {
  FP8KIT_REQUIRE_GPU();
  DeviceBuffer<float> x(16), scale(1);
  std::vector<QuantizeArgs> args(2);
  for (QuantizeArgs& a : args) a.x = x.data(), a.rows = 4, a.cols = 4, a.scale = scale.data();
  args[1].format = Fp8Format::E5M2;
  EXPECT_THROW(quantize_fp8_batch(args), Error);
  quantize_fp8_batch({});  // nothing to do
}

}  // namespace
}  // namespace fp8kit::cuda
