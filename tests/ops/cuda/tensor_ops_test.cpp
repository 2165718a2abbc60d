// Every Tensor-level op on both backends (ggml's test-backend-ops habit): the same call on CPU
// tensors and on their CUDA copies. Quantization agrees bit for bit, dequantization too (up to NaN
// signs); matmul within the cuBLASLt tolerances of gemm_test.cpp (relative Frobenius error).
#include "ops/matmul.h"
#include "ops/quantize.h"

#include "base/error.h"
#include "common/host_tensors.h"
#include "ops/cuda/gpu_test.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace fp8kit::ops {
namespace {

using cuda::testing::awkward_floats;
using cuda::testing::random_normal;
using cuda::testing::relative_l2;
using testing::float_values;
using testing::host_tensor;
using testing::scalar_tensor;

void expect_same_bytes(const Tensor& cpu, const Tensor& gpu, const char* what) {
  const Tensor back = gpu.to(Device::Cpu);
  ASSERT_EQ(back.shape(), cpu.shape()) << what;
  EXPECT_EQ(std::memcmp(back.device_data<std::byte>(), cpu.device_data<std::byte>(), cpu.nbytes()), 0) << what;
}

struct Shape {
  int64_t rows, cols;
};
const Shape kShapes[] = {{1, 16}, {5, 160}, {217, 256}, {64, 33}};

TEST(TensorOpsOnBothBackends, QuantizeAndDequantizeAreBitIdentical) {
  FP8KIT_REQUIRE_GPU();
  uint32_t seed = 1;
  for (const Shape& s : kShapes) {
    for (DType x_type : {DType::F32, DType::Bf16}) {
      for (Fp8Format format : {Fp8Format::E4M3, Fp8Format::E5M2}) {
        const Tensor x = host_tensor(awkward_floats(s.rows * s.cols, seed++), {s.rows, s.cols}, x_type);
        const Tensor xg = x.to(Device::Cuda);
        const Tensor scale_c = scalar_tensor(0.75f, Device::Cpu), scale_g = scalar_tensor(0.75f, Device::Cuda);
        const QTensor c = quantize(x, {.format = format}, &scale_c, true);
        const QTensor g = quantize(xg, {.format = format}, &scale_g, true);
        expect_same_bytes(c.codes, g.codes, "codes");
        expect_same_bytes(c.codes_t, g.codes_t, "transposed codes");
        expect_same_bytes(c.amax, g.amax, "amax");
        expect_same_bytes(c.scale_inv, g.scale_inv, "scale_inv");
        // NaN codes dequantize to NaN on both, without the CPU's sign on the GPU (ops/cuda/convert.h).
        const std::vector<float> dc = float_values(dequantize(c)), dg = float_values(dequantize(g));
        for (size_t i = 0; i < dc.size(); ++i) {
          if (std::isnan(dc[i])) EXPECT_TRUE(std::isnan(dg[i])) << i;
          else EXPECT_EQ(dg[i], dc[i]) << i;
        }
        const QTensor cc = quantize(x, {.format = format, .options = {.margin = 1}});
        const QTensor gc = quantize(xg, {.format = format, .options = {.margin = 1}});
        expect_same_bytes(cc.codes, gc.codes, "current-scaled codes");
        expect_same_bytes(cc.scale_inv, gc.scale_inv, "current scale_inv");
      }
    }
  }
}

TEST(TensorOpsOnBothBackends, MatmulAgreesWithinGemmTolerances) {
  FP8KIT_REQUIRE_GPU();
  const int64_t m = 96, n = 80, k = 256;
  const std::vector<float> av = random_normal(m * k, 1), bv = random_normal(n * k, 2);
  for (DType dtype : {DType::F32, DType::Bf16}) {
    const DType y_type = dtype;
    const Tensor a = host_tensor(av, {m, k}, dtype), b = host_tensor(bv, {n, k}, dtype);
    const Tensor bias = host_tensor(random_normal(n, 3), {n}, y_type);
    Tensor yc({m, n}, y_type), yg({m, n}, y_type, Device::Cuda);
    const Tensor bias_g = bias.to(Device::Cuda);
    matmul(a, b, yc, {.bias = &bias});
    matmul(a.to(Device::Cuda), b.to(Device::Cuda), yg, {.bias = &bias_g});
    EXPECT_LT(relative_l2(float_values(yg), float_values(yc)), dtype == DType::F32 ? 2e-6 : 3e-3) << name(dtype);
  }
  const Tensor a = host_tensor(av, {m, k}), b = host_tensor(bv, {n, k});
  const QTensor ac = quantize(a, {}), bc = quantize(b, {});
  const QTensor ag = quantize(a.to(Device::Cuda), {}), bg = quantize(b.to(Device::Cuda), {});
  for (bool fast : {false, true}) {
    Tensor yc({m, n}, DType::F32), yg({m, n}, DType::F32, Device::Cuda);
    matmul(ac, bc, yc, {.fast_accumulation = fast});
    matmul(ag, bg, yg, {.fast_accumulation = fast});
    EXPECT_LT(relative_l2(float_values(yg), float_values(yc)), fast ? 3e-3 : 3e-4) << "fp8, fast accumulation " << fast;
  }
}

TEST(TensorOpsOnBothBackends, MixedDevicesAreRefused) {
  FP8KIT_REQUIRE_GPU();
  const Tensor a({4, 16}, DType::F32), b({8, 16}, DType::F32, Device::Cuda);
  Tensor y({4, 8}, DType::F32, Device::Cuda);
  EXPECT_THROW(matmul(a, b, y), Error);
  const Tensor cpu_scale = scalar_tensor(1.0f, Device::Cpu);
  EXPECT_THROW(quantize(b, {}, &cpu_scale), Error);
}

}  // namespace
}  // namespace fp8kit::ops
