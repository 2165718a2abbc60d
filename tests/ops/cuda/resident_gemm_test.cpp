// The short-k FP8 GEMM (ops/cuda/resident_gemm.h) against cuBLASLt, both with fast accumulation: every
// y type and epilogue it runs, per-tensor and per-row scales, and shapes that exercise its edges (a
// partial last row block, column tile and slice of k; a cluster whose second block lies past m; units
// of one tile, so that one math warpgroup has none; more units than clusters, so that a's rows are
// reloaded); a bf16 a quantized inside it, against ops::quantize's codes.
#include "ops/cuda/resident_gemm.h"

#include "common/host_tensors.h"
#include "numerics/cast.h"
#include "ops/cuda/gemm.h"
#include "ops/cuda/gpu_test.h"
#include "ops/gemm.h"
#include "ops/quantize.h"
#include "runtime/cuda/check.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace fp8kit::ops {
namespace {

using cuda::testing::random_normal;
using testing::float_values;
using testing::host_tensor;
using testing::scalar_tensor;

struct Case {
  int64_t m, n, k;
  DType y_type;
  cuda::Epilogue epilogue;
  bool per_row;
};

// y's values: an E4M3 y's codes decoded (unscaled), the others as floats.
std::vector<float> values(const Tensor& y) {
  if (y.dtype() != DType::E4M3) return float_values(y);
  const Tensor host = y.to(Device::Cpu);
  std::vector<float> out(static_cast<size_t>(host.numel()));
  decode_fp8(host.span<uint8_t>(), Fp8Format::E4M3, out);
  return out;
}

// y for case c, filled with NaN markers so that an element the product leaves unwritten cannot pass.
Tensor marked_y(const Case& c) {
  Tensor y({c.m, c.n}, c.y_type, Device::Cuda);
  FP8KIT_CUDA_CHECK(cudaMemset(y.device_data<std::byte>(), 0xFF, y.nbytes()));
  return y;
}

// Case c's product into y of b's codes (scale_inv set; per row with c.per_row) with fast accumulation,
// y_scale for an E4M3 y, the bias with bias epilogues; a and its scales are the caller's.
cuda::GemmArgs args_for(const Case& c, const QTensor& b, Tensor& y, const Tensor& y_scale, const Tensor& bias) {
  cuda::GemmArgs args;
  args.m = c.m, args.n = c.n, args.k = c.k;
  args.b = b.codes.device_data<std::byte>(), args.b_type = DType::E4M3, args.b_scale_inv = b.scale_inv.device_data<float>();
  if (c.per_row) args.a_scale_mode = args.b_scale_mode = cuda::ScaleMode::OuterVec;
  args.y = y.device_data<std::byte>(), args.y_type = c.y_type;
  if (c.y_type == DType::E4M3) args.y_scale = y_scale.device_data<float>();
  args.epilogue = c.epilogue;
  if (cuda::has_bias(c.epilogue)) args.bias = bias.device_data<std::byte>();
  args.fast_accumulation = true;
  return args;
}

std::string describe(const Case& c) {
  return fmt::format("{}x{}x{} -> {}, epilogue {}{}", c.m, c.n, c.k, name(c.y_type), static_cast<int>(c.epilogue),
                     c.per_row ? ", per-row scales" : "");
}

TEST(ResidentGemm, AgreesWithCublasLt) {
  FP8KIT_REQUIRE_GPU();
  using cuda::Epilogue;
  const Case cases[] = {
      {260, 656, 784, DType::E4M3, Epilogue::GeluBias, false},  // 3 row blocks, 6 column tiles, 7 slices: all partial
      {260, 656, 784, DType::Bf16, Epilogue::Bias, false},
      {260, 656, 784, DType::F32, Epilogue::None, false},
      {1000, 3072, 768, DType::E4M3, Epilogue::GeluBias, false},  // units of two tiles: both warpgroups
      {1000, 3072, 768, DType::Bf16, Epilogue::Gelu, false},
      {1000, 3072, 768, DType::F32, Epilogue::GeluBias, false},
      {300, 520, 256, DType::Bf16, Epilogue::Bias, true},
      {300, 520, 256, DType::F32, Epilogue::None, true},
      {17000, 136, 128, DType::Bf16, Epilogue::Bias, false},  // more row-block pairs than clusters
      {70, 24, 32, DType::E4M3, Epilogue::None, false},  // one slice of k, fewer than 128 rows and columns
  };
  for (const Case& c : cases) {
    const std::string what = describe(c);
    std::vector<float> xv = random_normal(c.m * c.k, 11), wv = random_normal(c.n * c.k, 12);
    for (int64_t i = 0; i < c.m * c.k; ++i) xv[i] *= std::ldexp(1.0f, static_cast<int>(i / c.k % 5) - 2);
    const Tensor x = host_tensor(xv, {c.m, c.k}).to(Device::Cuda), w = host_tensor(wv, {c.n, c.k}).to(Device::Cuda);
    const Tensor bias = host_tensor(random_normal(c.n, 13), {c.n}, DType::Bf16).to(Device::Cuda);
    const QuantSpec spec{.granularity = c.per_row ? Granularity::PerRow : Granularity::PerTensor};
    const QTensor xq = quantize(x, spec), wq = quantize(w, spec);
    const Tensor y_scale = host_tensor({2.0f}, {1}).to(Device::Cuda);
    // sum_l |term| per output (scaled), the fast accumulator's error bound's scale.
    const std::vector<float> xa = float_values(dequantize(xq)), wa = float_values(dequantize(wq));
    std::vector<float> results[2];
    for (const bool own : {true, false}) {
      cuda::GemmContext context({.resident_kernel = false});
      Tensor y = marked_y(c);
      cuda::GemmArgs args = args_for(c, wq, y, y_scale, bias);
      args.a = xq.codes.device_data<std::byte>(), args.a_type = DType::E4M3;
      args.a_scale_inv = xq.scale_inv.device_data<float>();
      ASSERT_EQ(cuda::resident_gemm_runs(args), true) << what;
      if (own) {
        cuda::resident_gemm(args, nullptr);
      } else {
        context.gemm(args);
      }
      results[own ? 0 : 1] = values(y);
    }
    int64_t differing = 0;
    for (int64_t i = 0; i < c.m; ++i) {
      for (int64_t j = 0; j < c.n; ++j) {
        double magnitude = 0.0;
        for (int64_t l = 0; l < c.k; ++l) magnitude += std::fabs(static_cast<double>(xa[i * c.k + l]) * wa[j * c.k + l]);
        const float own = results[0][i * c.n + j], theirs = results[1][i * c.n + j];
        // GELU's slope is at most 1.13; an E4M3 y (times 2) may round either way, one step (2^-3 relative).
        const double rounding = c.y_type == DType::E4M3 ? 0x1p-3 : c.y_type == DType::Bf16 ? 0x1p-7 : 0.0;
        const double scale = c.y_type == DType::E4M3 ? 2.0 : 1.0;
        const double tol = rounding * std::fabs(theirs) + scale * 0x1p-11 * magnitude + 1e-30;
        ASSERT_NEAR(own, theirs, tol) << what << " at " << i << "," << j;
        differing += own != theirs;
      }
    }
    // Rounded to bf16 or E4M3, mostly the same values: the products' order differs within the fast
    // accumulator only (f32's last bits differ with any order).
    if (c.y_type != DType::F32) {
      EXPECT_LT(differing, c.m * c.n / 4) << what;
    }
  }
}

// A bf16 a with a_scale: quantized inside the kernel, the same bits as ops::quantize's codes multiplied
// by the same kernel; where the kernel is not used, quantized into a temporary first (cuBLASLt's bits).
TEST(ResidentGemm, QuantizesABf16AsTheQuantizeOpDoes) {
  FP8KIT_REQUIRE_GPU();
  using cuda::Epilogue;
  const Case cases[] = {
      {260, 656, 784, DType::E4M3, Epilogue::GeluBias, false},
      {1000, 3072, 768, DType::Bf16, Epilogue::Bias, false},
      {70, 24, 32, DType::F32, Epilogue::None, false},
      {34000, 136, 128, DType::Bf16, Epilogue::Bias, false},  // more row-block pairs than clusters: rows re-quantized
  };
  for (const Case& c : cases) {
    const std::string what = describe(c);
    std::vector<float> xv = random_normal(c.m * c.k, 31);
    for (int64_t i = 0; i < c.m * c.k; i += 97) xv[i] *= 64.0f;  // some saturate at the scale below
    const Tensor x = host_tensor(xv, {c.m, c.k}, DType::Bf16).to(Device::Cuda);
    const Tensor w = host_tensor(random_normal(c.n * c.k, 32), {c.n, c.k}).to(Device::Cuda);
    const Tensor bias = host_tensor(random_normal(c.n, 33), {c.n}, DType::Bf16).to(Device::Cuda);
    const Tensor x_scale = host_tensor({40.0f}, {1}).to(Device::Cuda), y_scale = host_tensor({2.0f}, {1}).to(Device::Cuda);
    const QTensor wq = quantize(w, {}), xq = quantize(x, {}, &x_scale);
    for (const bool own : {true, false}) {
      std::vector<float> results[2];
      for (const bool fused : {true, false}) {
        cuda::GemmContext context({.resident_kernel = own});
        Tensor y = marked_y(c);
        cuda::GemmArgs args = args_for(c, wq, y, y_scale, bias);
        if (fused) {
          args.a = x.device_data<std::byte>(), args.a_type = DType::Bf16, args.a_scale = x_scale.device_data<float>();
        } else {
          args.a = xq.codes.device_data<std::byte>(), args.a_type = DType::E4M3;
          args.a_scale_inv = xq.scale_inv.device_data<float>();
        }
        const bool kernel = own && c.m >= cuda::kResidentGemmMinRows;  // GemmContext's choice for the fused one
        if (!fused && kernel) {
          cuda::resident_gemm(args, nullptr);
        } else {
          context.gemm(args);
        }
        if (fused) {
          EXPECT_EQ(context.resident_kernel_gemms(), kernel ? 1u : 0u) << what;
        }
        results[fused ? 0 : 1] = values(y);
      }
      for (int64_t i = 0; i < c.m * c.n; ++i)
        ASSERT_EQ(results[0][i], results[1][i]) << what << (own ? "" : " (cuBLASLt)") << " at " << i / c.n << "," << i % c.n;
    }
  }
}

// GemmContext runs GELU epilogues of 256 rows or more on the kernel where it runs them, the others on
// cuBLASLt.
TEST(ResidentGemm, RunsTheGeluEpiloguesOfGemmContext) {
  FP8KIT_REQUIRE_GPU();
  const int64_t m = 256, n = 384, k = 768;
  const Tensor x = host_tensor(random_normal(m * k, 21), {m, k}).to(Device::Cuda);
  const Tensor w = host_tensor(random_normal(n * k, 22), {n, k}).to(Device::Cuda);
  const QTensor xq = quantize(x, {}), wq = quantize(w, {});
  Tensor y({m, n}, DType::Bf16, Device::Cuda);
  cuda::GemmContext context;
  cuda::GemmArgs args;
  args.m = m, args.n = n, args.k = k;
  args.a = xq.codes.device_data<std::byte>(), args.a_type = DType::E4M3;
  args.b = wq.codes.device_data<std::byte>(), args.b_type = DType::E4M3;
  args.y = y.device_data<std::byte>(), args.y_type = DType::Bf16;
  args.a_scale_inv = xq.scale_inv.device_data<float>(), args.b_scale_inv = wq.scale_inv.device_data<float>();
  args.fast_accumulation = true;
  context.gemm(args);
  EXPECT_EQ(context.resident_kernel_gemms(), 0u);
  args.epilogue = cuda::Epilogue::Gelu;
  context.gemm(args);
  EXPECT_EQ(context.resident_kernel_gemms(), 1u);
  args.fast_accumulation = false;  // the split accumulator: cuBLASLt's
  context.gemm(args);
  EXPECT_EQ(context.resident_kernel_gemms(), 1u);
  args.fast_accumulation = true;
  args.m = cuda::kResidentGemmMinRows - 8;  // few rows: cuBLASLt's
  context.gemm(args);
  EXPECT_EQ(context.resident_kernel_gemms(), 1u);
}

// GELU into E4M3 codes against double precision, over values from 2^-12 to past E4M3's range and y
// scales from 2^-40 to 2^45, 0 and negative: a's rows pick one of b's codes each (one product per
// output, exact), so y = y_scale GELU(sa sb code + bias) with x known exactly. Per-tensor scales, and
// scales per row that differ by row and column (OuterVec: the epilogue's other path).
TEST(ResidentGemm, GeluIntoE4M3FollowsTheReference) {
  FP8KIT_REQUIRE_GPU();
  const int64_t m = 256, n = 256, k = 128;
  Tensor a({m, k}, DType::E4M3), b({n, k}, DType::E4M3);
  std::ranges::fill(a.span<uint8_t>(), uint8_t{0});
  for (int64_t i = 0; i < m; ++i) a.span<uint8_t>()[i * k + i % k] = encode_fp8<Fp8Format::E4M3>(1.0f);
  for (int64_t i = 0; i < n * k; ++i) b.span<uint8_t>()[i] = static_cast<uint8_t>((i * 37 + i / k * 11) % 256);
  for (uint8_t& code : b.span<uint8_t>()) code = (code & 0x7F) == 0x7F ? code - 1 : code;  // no NaN codes
  const Tensor bias = host_tensor(random_normal(n, 31, 4.0f), {n}, DType::Bf16);
  const Tensor a_gpu = a.to(Device::Cuda), b_gpu = b.to(Device::Cuda), bias_gpu = bias.to(Device::Cuda);
  const std::vector<float> bias_used = float_values(bias);
  const auto e4m3 = [](uint8_t code) { return fp8kit::decode_fp8(code, Fp8Format::E4M3); };
  for (const bool per_row : {false, true}) {
    for (const float b_scale : {0x1p-3f, 0x1p-12f, 0x1p8f}) {
      std::vector<float> sa(per_row ? m : 1, 1.0f), sb(per_row ? n : 1, b_scale);
      if (per_row) {
        for (int64_t i = 0; i < m; ++i) sa[i] = std::ldexp(1.0f, static_cast<int>(i % 3) - 1);
        for (int64_t j = 0; j < n; ++j) sb[j] = std::ldexp(b_scale, static_cast<int>(j % 4) - 2);
      }
      const Tensor sa_gpu = host_tensor(sa, {static_cast<int64_t>(sa.size())}).to(Device::Cuda);
      const Tensor sb_gpu = host_tensor(sb, {static_cast<int64_t>(sb.size())}).to(Device::Cuda);
      for (const float y_scale : {2.0f, 0.0448f, -2.0f, 0x1p-40f, 0x1p40f, 0x1p45f, 0.0f}) {
        const std::string what = fmt::format("b scale {}, y scale {}{}", b_scale, y_scale, per_row ? ", per row" : "");
        const Tensor y_scale_gpu = scalar_tensor(y_scale, Device::Cuda);
        Tensor y({m, n}, DType::E4M3, Device::Cuda);
        cuda::GemmArgs args;
        args.m = m, args.n = n, args.k = k;
        args.a = a_gpu.device_data<std::byte>(), args.a_type = DType::E4M3;
        args.b = b_gpu.device_data<std::byte>(), args.b_type = DType::E4M3;
        args.a_scale_inv = sa_gpu.device_data<float>(), args.b_scale_inv = sb_gpu.device_data<float>();
        if (per_row) args.a_scale_mode = args.b_scale_mode = cuda::ScaleMode::OuterVec;
        args.y = y.device_data<std::byte>(), args.y_type = DType::E4M3, args.y_scale = y_scale_gpu.device_data<float>();
        args.bias = bias_gpu.device_data<std::byte>(), args.epilogue = cuda::Epilogue::GeluBias;
        args.fast_accumulation = true;
        ASSERT_TRUE(cuda::resident_gemm_runs(args)) << what;
        cuda::resident_gemm(args, nullptr);
        const std::vector<float> own = values(y);
        int64_t differing = 0;
        for (int64_t i = 0; i < m; ++i) {
          for (int64_t j = 0; j < n; ++j) {
            const double x = static_cast<double>(sa[per_row ? i : 0]) * sb[per_row ? j : 0] *
                                 e4m3(b.span<uint8_t>()[j * k + i % k]) + bias_used[j];
            const double exact = y_scale * 0.5 * x * (1.0 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)));
            const float got = own[i * n + j];
            // One code either way of the exactly rounded one (1.5 steps: a step is at most 2^-3 of the
            // value), and tanh.approx's error (2^-10.9 relative) times h = y_scale x / 2 where 1 +
            // tanh(u) cancels; codes below 2^-9 are subnormal steps.
            const double tol = 0x1.8p-3 * std::fabs(exact) + 0x1p-11 * std::fabs(y_scale * x) + 0x1.8p-9;
            ASSERT_LE(std::fabs(got - std::clamp(exact, -448.0, 448.0)), tol) << what << " at " << i << "," << j << ": x " << x;
            differing += got != e4m3(encode_fp8<Fp8Format::E4M3>(static_cast<float>(exact)));
          }
        }
        // Past y scales of about 2^17 the cancelling negative tail matters (GELU's minimum is -0.17).
        if (std::fabs(y_scale) <= 2.0f) {
          EXPECT_LT(differing, m * n / 100) << what;
        }
      }
    }
  }
}

TEST(ResidentGemm, RefusesWhatItDoesNotRun) {
  FP8KIT_REQUIRE_GPU();
  cuda::GemmArgs args;
  args.m = 256, args.n = 256, args.k = 256;
  alignas(16) static const std::byte dummy[16] = {};
  args.a = args.b = args.y = const_cast<std::byte*>(dummy);
  args.a_type = args.b_type = DType::E4M3, args.y_type = DType::Bf16;
  args.fast_accumulation = true;
  EXPECT_TRUE(cuda::resident_gemm_runs(args));
  cuda::GemmArgs split = args;
  split.fast_accumulation = false;  // the split accumulator: cuBLASLt's
  EXPECT_FALSE(cuda::resident_gemm_runs(split));
  cuda::GemmArgs long_k = args;
  long_k.k = 8192;  // a's rows do not fit in shared memory
  EXPECT_FALSE(cuda::resident_gemm_runs(long_k));
  cuda::GemmArgs e5m2 = args;
  e5m2.a_type = DType::E5M2;
  EXPECT_FALSE(cuda::resident_gemm_runs(e5m2));
  cuda::GemmArgs accumulate = args;
  accumulate.accumulate = true;
  EXPECT_FALSE(cuda::resident_gemm_runs(accumulate));
  EXPECT_THROW(cuda::resident_gemm(long_k, nullptr), Error);
}

}  // namespace
}  // namespace fp8kit::ops
